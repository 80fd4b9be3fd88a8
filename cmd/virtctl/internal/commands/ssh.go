package commands

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

// sshOptions are KubeVirt's flags of virtctl ssh and scp. Both run the local OpenSSH client
// with virtctl port-forward --stdio as its ProxyCommand, as KubeVirt's virtctl does, so the
// user's ssh configuration, agent and known hosts apply.
type sshOptions struct {
	port         int
	username     string
	identityFile string
	knownHosts   string
	localOpts    []string
}

func addSSHFlags(fs *pflag.FlagSet, o *sshOptions) {
	o.port = 22
	o.username = defaultUsername()
	home, _ := os.UserHomeDir()
	fs.StringVarP(&o.username, "username", "l", o.username, "--username=jdoe: Set this to the user you want to open the SSH connection as; If unassigned, this will be empty and the SSH default will apply")
	fs.StringVarP(&o.identityFile, "identity-file", "i", filepath.Join(home, ".ssh", "id_rsa"), "--identity-file=/home/jdoe/.ssh/id_rsa: Set the path to a private key used for authenticating to the server; If not provided, the client will try to use the local ssh-agent at $SSH_AUTH_SOCK")
	fs.StringVar(&o.knownHosts, "known-hosts", filepath.Join(home, ".ssh", "kubevirt_known_hosts"), "--known-hosts=/home/jdoe/.ssh/kubevirt_known_hosts: Set the path to the known_hosts file.")
	fs.IntVarP(&o.port, "port", "p", o.port, "--port=22: Specify a port on the VM to send SSH traffic to")
	fs.StringArrayVarP(&o.localOpts, "local-ssh-opts", "t", nil, `--local-ssh-opts="-o StrictHostKeyChecking=no" : Additional options to be passed to the local ssh client`)
}

func defaultUsername() string {
	for _, v := range []string{"USER", "USERNAME", "LOGNAME"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return ""
}

// sshTarget parses [username@]type/name[/namespace].
func sshTarget(arg string) (resource, name, namespace, user string, err error) {
	if u, rest, ok := strings.Cut(arg, "@"); ok {
		if u == "" {
			return "", "", "", "", errors.New("expected username before '@'")
		}
		user, arg = u, rest
	}
	if arg == "" {
		return "", "", "", "", errors.New("expected target after '@'")
	}
	resource, name, namespace, err = parseTarget(arg)
	return resource, name, namespace, user, err
}

// kindName is the short kind KubeVirt's virtctl puts into the host name it gives ssh.
func kindName(resource string) string {
	if resource == kvclient.VirtualMachines {
		return "vm"
	}
	return "vmi"
}

// localClient is the ssh or scp command: the ProxyCommand that runs this virtctl's port-forward
// (with the connection flags this run was given), the options, then args.
func localClient(cmd *cobra.Command, program string, d sshDest, o *sshOptions, args []string) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	proxy := []string{shellQuote(self)}
	global := cmd.Root().PersistentFlags()
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if global.Lookup(f.Name) == f && f.Name != "namespace" {
			proxy = append(proxy, shellQuote("--"+f.Name+"="+f.Value.String()))
		}
	})
	proxy = append(proxy, "port-forward", "--stdio=true", shellQuote(kindName(d.resource)+"/"+d.name+"/"+d.namespace), strconv.Itoa(o.port))
	argv := []string{"-o", "ProxyCommand=" + strings.Join(proxy, " ")}
	argv = append(argv, o.localOpts...)
	if cmd.Flags().Changed("identity-file") {
		argv = append(argv, "-i", o.identityFile)
	}
	if cmd.Flags().Changed("known-hosts") {
		argv = append(argv, "-o", "UserKnownHostsFile="+o.knownHosts)
	}
	c := exec.CommandContext(cmd.Context(), program, append(argv, args...)...)
	c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	return c
}

// sshDest is whom ssh or scp connects to.
type sshDest struct{ resource, name, namespace, user string }

// resolveDest parses [username@]type/name[/namespace], with the --username and the
// kubeconfig's namespace where the argument names none.
func resolveDest(e *env, arg string, o *sshOptions) (sshDest, error) {
	var d sshDest
	var err error
	if d.resource, d.name, d.namespace, d.user, err = sshTarget(arg); err != nil {
		return d, err
	}
	if d.user == "" {
		d.user = o.username
	}
	if d.namespace == "" {
		d.namespace, _, err = e.config.Namespace()
	}
	return d, err
}

// host is the host name ssh sees (and records in known_hosts): [user@]kind.name.namespace.
func (d sshDest) host() string {
	h := kindName(d.resource) + "." + d.name + "." + d.namespace
	if d.user != "" {
		h = d.user + "@" + h
	}
	return h
}

// shellQuote quotes s for the shell that ssh runs the ProxyCommand with.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runLocal runs c and passes on its exit status as virtctl's own.
func runLocal(c *exec.Cmd) error {
	err := c.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return &exitCodeError{code: exit.ExitCode(), err: fmt.Errorf("%s exited with status %d", filepath.Base(c.Path), exit.ExitCode())}
	}
	if errors.Is(err, exec.ErrNotFound) {
		return fmt.Errorf("%s: the local OpenSSH client is needed (install openssh-client)", filepath.Base(c.Path))
	}
	return err
}

// exitCodeError carries the exit status of the local client.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }

func newSSHCommand(e *env) *cobra.Command {
	var (
		o       sshOptions
		command string
	)
	cmd := &cobra.Command{
		Use:   "ssh (VM|VMI)",
		Short: "Open a SSH connection to a virtual machine instance.",
		Example: `  # Connect to 'testvmi':
  virtctl ssh jdoe@vmi/testvmi [--identity-file]

  # Connect to 'testvm' in 'mynamespace' namespace
  virtctl ssh jdoe@vm/testvm/mynamespace [--identity-file]

  # Specify a username and namespace:
  virtctl ssh --namespace=mynamespace --username=jdoe vmi/testvmi`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := resolveDest(e, args[0], &o)
			if err != nil {
				return err
			}
			target := []string{d.host()}
			if command != "" {
				target = append(target, command)
			}
			return runLocal(localClient(cmd, "ssh", d, &o, target))
		},
	}
	addSSHFlags(cmd.Flags(), &o)
	cmd.Flags().StringVarP(&command, "command", "c", "", "--command='ls /': Specify a command to execute in the VM")
	return cmd
}

func newSCPCommand(e *env) *cobra.Command {
	var (
		o                   sshOptions
		recursive, preserve bool
	)
	cmd := &cobra.Command{
		Use:   "scp (VM|VMI)",
		Short: "SCP files from/to a virtual machine instance.",
		Example: `  # Copy a file to the remote home folder of user jdoe
  virtctl scp myfile.bin jdoe@vmi/testvmi:myfile.bin

  # Copy a directory to the remote home folder of user jdoe
  virtctl scp --recursive ~/mydir/ jdoe@vmi/testvmi:./mydir

  # Copy a file from the remote location to a local folder
  virtctl scp jdoe@vmi/testvmi:myfile.bin ~/myfile.bin`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			remote, local, toRemote, err := scpArgs(args[0], args[1])
			if err != nil {
				return err
			}
			target, path, _ := strings.Cut(remote, ":")
			d, err := resolveDest(e, target, &o)
			if err != nil {
				return err
			}
			var argv []string
			if recursive {
				argv = append(argv, "-r")
			}
			if preserve {
				argv = append(argv, "-p")
			}
			r := d.host() + ":" + path
			if toRemote {
				argv = append(argv, local, r)
			} else {
				argv = append(argv, r, local)
			}
			return runLocal(localClient(cmd, "scp", d, &o, argv))
		},
	}
	addSSHFlags(cmd.Flags(), &o)
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "Recursively copy entire directories")
	cmd.Flags().BoolVar(&preserve, "preserve", false, "Preserves modification times, access times, and modes from the original file.")
	return cmd
}

// scpArgs finds which of source and destination is the remote one (it holds a ':').
func scpArgs(source, destination string) (remote, local string, toRemote bool, err error) {
	sr, dr := strings.Contains(source, ":"), strings.Contains(destination, ":")
	switch {
	case sr && dr:
		return "", "", false, fmt.Errorf("copying from a remote location to another remote location is not supported: %q to %q", source, destination)
	case !sr && !dr:
		return "", "", false, fmt.Errorf("none of the two provided locations seems to be a remote location: %q to %q", source, destination)
	case dr:
		return destination, source, true, nil
	}
	return source, destination, false, nil
}
