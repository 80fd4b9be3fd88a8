package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

type vncFlags struct {
	proxyOnly       bool
	port            int
	address         string
	preserveSession bool
}

func newVNCCommand(e *env) *cobra.Command {
	var f vncFlags
	cmd := &cobra.Command{
		Use:   "vnc (VMI)",
		Short: "Open a vnc connection to a virtual machine instance.",
		Example: `  # Connect to 'testvmi' via remote-viewer:
  virtctl vnc testvmi
  # Only start the proxy and print its port, to connect a VNC client of your own:
  virtctl vnc testvmi --proxy-only`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			return runVNC(cmd, c, ns, args[0], f)
		},
	}
	cmd.Flags().BoolVar(&f.proxyOnly, "proxy-only", false, "--proxy-only=false: Setting this true will run only the virtctl vnc proxy and show the port where VNC viewers can connect")
	cmd.Flags().IntVar(&f.port, "port", 0, "--port=0: Assigning a port value to this will try to run the proxy on the given port if the port is accessible; If unassigned, the proxy will run on a random port")
	cmd.Flags().StringVar(&f.address, "address", "127.0.0.1", "--address=127.0.0.1: Setting this will change the listening address of the VNC server. Example: --address=0.0.0.0 will make the server listen on all interfaces.")
	cmd.Flags().BoolVar(&f.preserveSession, "preserve-session", false, "--preserve-session=false: Do not take over an open VNC session; fail instead")
	cmd.AddCommand(newScreenshotCommand(e))
	return cmd
}

func runVNC(cmd *cobra.Command, c *kvclient.Client, ns, name string, f vncFlags) error {
	ctx := cmd.Context()
	query := url.Values{}
	if f.preserveSession {
		query.Set("preserveSession", "true")
	}
	dial := func() (io.ReadWriteCloser, error) {
		s, err := c.Stream(ctx, ns, kvclient.VirtualMachineInstances, name, query, "vnc")
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	// The first stream is opened before listening, so a VMI that cannot be reached fails the
	// command instead of every viewer connection.
	first, err := dial()
	if err != nil {
		return fmt.Errorf("Can't access VMI %s: %v", name, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(f.address, strconv.Itoa(f.port)))
	if err != nil {
		first.Close()
		return fmt.Errorf("Can't listen on %s:%d: %v", f.address, f.port, err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()

	if f.proxyOnly {
		b, _ := json.Marshal(map[string]int{"port": port})
		fmt.Fprintln(out(cmd), string(b))
	} else if viewer, args := findViewer(f.address, port); viewer != "" {
		v := exec.CommandContext(ctx, viewer, args...)
		v.Stdout, v.Stderr = cmd.ErrOrStderr(), cmd.ErrOrStderr()
		if err := v.Start(); err != nil {
			first.Close()
			return fmt.Errorf("%s execution failed: %v", viewer, err)
		}
		// The command ends with the viewer.
		go func() {
			_ = v.Wait()
			cancel()
		}()
	} else {
		fmt.Fprintf(cmd.ErrOrStderr(), "No supported VNC app found in PATH (remote-viewer, vncviewer, xtightvncviewer).\n"+
			"Connect a VNC client to %s, e.g. vncviewer %s::%d; press Ctrl+C to stop.\n",
			net.JoinHostPort(f.address, strconv.Itoa(port)), f.address, port)
	}
	serveVNC(ctx, ln, first, dial, cmd.ErrOrStderr())
	return nil
}

// serveVNC proxies one viewer connection at a time; later viewers wait in the listen queue.
// Each viewer after the first gets a fresh stream.
func serveVNC(ctx context.Context, ln net.Listener, first io.ReadWriteCloser, dial func() (io.ReadWriteCloser, error), errOut io.Writer) {
	next := first
	defer func() {
		if next != nil {
			next.Close()
		}
	}()
	for {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		stream := next
		next = nil
		if stream == nil {
			if stream, err = dial(); err != nil {
				fmt.Fprintf(errOut, "Can't access VMI: %v\n", err)
				client.Close()
				if ctx.Err() != nil {
					return
				}
				continue
			}
		}
		stop := context.AfterFunc(ctx, func() {
			client.Close()
			stream.Close()
		})
		kvclient.Splice(client, stream)
		stop()
	}
}

// findViewer picks the first installed VNC viewer and its arguments for 127.0.0.1:port.
func findViewer(address string, port int) (string, []string) {
	if address == "0.0.0.0" || address == "::" || address == "" {
		address = "127.0.0.1"
	}
	candidates := []struct {
		bin  string
		args []string
	}{
		{"remote-viewer", []string{fmt.Sprintf("vnc://%s", net.JoinHostPort(address, strconv.Itoa(port)))}},
		{"vncviewer", []string{fmt.Sprintf("%s::%d", address, port)}},
		{"xtightvncviewer", []string{fmt.Sprintf("%s::%d", address, port)}},
	}
	for _, c := range candidates {
		if path, err := exec.LookPath(c.bin); err == nil {
			return path, c.args
		}
	}
	return "", nil
}
