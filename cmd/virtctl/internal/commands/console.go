package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

// escapeByte is Ctrl+], which leaves the console.
const escapeByte = 0x1d

func newConsoleCommand(e *env) *cobra.Command {
	var timeout int
	cmd := &cobra.Command{
		Use:   "console (VMI)",
		Short: "Connect to a console of a virtual machine instance.",
		Example: `  # Connect to the console on VirtualMachineInstance 'myvmi':
  virtctl console myvmi
  # Configure one minute timeout (default 5 minutes)
  virtctl console --timeout=1 myvmi`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			conn, err := dialConsole(ctx, c, ns, name, time.Duration(timeout)*time.Minute, time.Second)
			if err != nil {
				if ctx.Err() != nil {
					// Interrupted while waiting for the VM: leave quietly, as KubeVirt does.
					fmt.Fprintln(out(cmd))
					return nil
				}
				return err
			}
			defer conn.Close()

			in := cmd.InOrStdin()
			fmt.Fprint(cmd.ErrOrStderr(), "Successfully connected to ", name, " console. The escape sequence is ^]\n")
			if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				state, err := term.MakeRaw(int(f.Fd()))
				if err != nil {
					return fmt.Errorf("Make raw terminal failed: %s", err)
				}
				defer func() { _ = term.Restore(int(f.Fd()), state) }()
			}
			return attach(ctx, conn, in, out(cmd))
		},
	}
	cmd.Flags().IntVar(&timeout, "timeout", 5, "The number of minutes to wait for the virtual machine instance to be ready.")
	return cmd
}

// dialConsole opens the console stream, retrying while the server answers 400 (the VMI is
// not running yet) until timeout.
func dialConsole(ctx context.Context, c *kvclient.Client, ns, name string, timeout, retry time.Duration) (io.ReadWriteCloser, error) {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := c.Stream(ctx, ns, kvclient.VirtualMachineInstances, name, nil, "console")
		if err == nil {
			return conn, nil
		}
		if kvclient.StreamCode(err) != http.StatusBadRequest {
			return nil, err
		}
		if !time.Now().Add(retry).Before(deadline) {
			return nil, errors.New("Timeout trying to connect to the virtual machine instance")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(retry):
		}
	}
}

// attach copies in to the console and the console to out until the escape byte, the end of
// either stream, or ctx. Bytes typed before the escape byte in the same read are still sent.
func attach(ctx context.Context, conn io.ReadWriteCloser, in io.Reader, out io.Writer) error {
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(out, conn)
		done <- err
	}()
	go func() {
		buf := make([]byte, 1024)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				esc := bytes.IndexByte(chunk, escapeByte)
				if esc >= 0 {
					chunk = chunk[:esc]
				}
				if len(chunk) > 0 {
					if _, werr := conn.Write(chunk); werr != nil {
						done <- werr
						return
					}
				}
				if esc >= 0 {
					done <- nil
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				done <- err
				return
			}
		}
	}()
	select {
	case <-ctx.Done():
		return nil
	case err := <-done:
		return err
	}
}
