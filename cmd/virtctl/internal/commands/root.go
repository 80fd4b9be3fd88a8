// Package commands is virtctl's command line: KubeVirt's virtctl command names, flags and
// messages for the commands qvirt serves, over the kvclient package.
package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
	"github.com/qvirt/qvirt/internal/version"
)

// env is what every command needs: the kubeconfig, loaded lazily after flag parsing.
type env struct {
	config clientcmd.ClientConfig
	// connected is set once a command built a client, so argument errors never reach the server.
	connected bool
}

// client builds the API client and resolves the namespace (-n, else the context's, else default).
func (e *env) client() (*kvclient.Client, string, error) {
	ns, _, err := e.config.Namespace()
	if err != nil {
		return nil, "", err
	}
	rc, err := e.config.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	c, err := kvclient.New(rc)
	if err != nil {
		return nil, "", err
	}
	e.connected = true
	return c, ns, nil
}

// NewRootCommand builds virtctl. The kubeconfig is found as kubectl finds it: --kubeconfig,
// then KUBECONFIG, then ~/.kube/config, with clientcmd's standard override flags
// (--context, --namespace/-n, --server/-s, --token, ...).
func NewRootCommand() (*cobra.Command, *env) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.DefaultClientConfig = &clientcmd.DefaultClientConfig
	overrides := &clientcmd.ConfigOverrides{}

	root := &cobra.Command{
		Use:           "virtctl",
		Short:         "virtctl controls virtual machine related operations on your kubernetes cluster.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	flags := root.PersistentFlags()
	flags.StringVar(&rules.ExplicitPath, "kubeconfig", "", "Path to the kubeconfig file to use for CLI requests.")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	// KubeVirt's virtctl keeps -s for --server, as older kubectl did.
	names.ClusterOverrideFlags.APIServer.ShortName = "s"
	clientcmd.BindOverrideFlags(overrides, flags, names)

	e := &env{config: clientcmd.NewInteractiveDeferredLoadingClientConfig(rules, overrides, os.Stdin)}
	root.AddCommand(
		newVersionCommand(e),
		newStartCommand(e),
		newStopCommand(e),
		newRestartCommand(e),
		newMigrateCommand(e),
		newMigrateCancelCommand(e),
		newPauseCommand(e, pause),
		newPauseCommand(e, unpause),
		newSoftRebootCommand(e),
		newResetCommand(e),
		newConsoleCommand(e),
		newVNCCommand(e),
		newPortForwardCommand(e),
		newSSHCommand(e),
		newSCPCommand(e),
		newScreenshotCommand(e),
		newGuestAgentCommand(e, "guestosinfo", "guestosinfo", "Return guest agent info about operating system."),
		newGuestAgentCommand(e, "userlist", "userlist", "Return full list of logged in users on a guest machine."),
		newGuestAgentCommand(e, "fslist", "filesystemlist", "Return full list of filesystems available on the guest machine."),
		newAddVolumeCommand(e),
		newRemoveVolumeCommand(e),
		newMemoryDumpCommand(e),
	)
	return root, e
}

// Execute runs virtctl with args and returns the exit code. Errors go to stderr; after a
// failure, as KubeVirt's virtctl does, a client/server version skew is reported too.
func Execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root, e := NewRootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		var exit *exitCodeError
		if errors.As(err, &exit) {
			// ssh and scp have said why already.
			return exit.code
		}
		if skew := versionSkew(e); skew != "" {
			fmt.Fprintln(stderr, skew)
		}
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// versionSkew returns a warning when the server's major.minor differs from ours, and nothing
// when the command never reached for the server or the server cannot be asked: the command's
// own error says why.
func versionSkew(e *env) string {
	if !e.connected {
		return ""
	}
	c, _, err := e.client()
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	server, err := c.ServerVersion(ctx)
	if err != nil {
		return ""
	}
	client := version.Get()
	cv, sv := majorMinor(client.GitVersion), majorMinor(server.GitVersion)
	if cv == "" || sv == "" || cv == sv {
		return ""
	}
	return fmt.Sprintf("You are using a client virtctl version that is different from the KubeVirt version running in the cluster\nClient Version: %#v\nServer Version: %#v\n", client, server)
}

// majorMinor returns "1.9" for "v1.9.0+qvirt.0.1.0", and "" for what is not a version.
func majorMinor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return ""
	}
	for _, p := range parts[:2] {
		if _, err := strconv.Atoi(p); err != nil {
			return ""
		}
	}
	return parts[0] + "." + parts[1]
}

// out is where a command's results go.
func out(cmd *cobra.Command) io.Writer { return cmd.OutOrStdout() }
