package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/spf13/cobra"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

// opener opens one stream to the forwarded port.
type opener func(ctx context.Context) (*kvclient.Conn, error)

func newPortForwardCommand(e *env) *cobra.Command {
	var (
		address, protocol string
		stdio             bool
	)
	cmd := &cobra.Command{
		Use:   "port-forward type/name[/namespace] [protocol/]localPort[:targetPort]...",
		Short: "Forward local ports to a virtualmachine or virtualmachineinstance.",
		Long: `Forward local ports to a virtualmachine or virtualmachineinstance.

The target argument supports the syntax type/name[/namespace]; type is vm or vmi (or
virtualmachine(s), virtualmachineinstance(s)).
The port argument supports the syntax protocol/localPort:targetPort with protocol/ and
:targetPort as optional fields. Protocol supports TCP (default) and UDP.
Every local connection opens its own websocket stream through the Kubernetes API server.`,
		Example: `  # Forward the local port 8080 to the vmi port:
  virtctl port-forward vmi/testvmi 8080
  # Forward the local port 8080 to the vm port 80:
  virtctl port-forward vm/testvm 8080:80
  # Forward the local port 8080 to the vmi port 9090 as a UDP connection:
  virtctl port-forward vmi/testvmi/mynamespace udp/8080:9090`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			resource, name, targetNS, err := parseTarget(args[0])
			if err != nil {
				return err
			}
			ports, err := parsePorts(args[1:], protocol)
			if err != nil {
				return err
			}
			if stdio && len(ports) != 1 {
				return errors.New("only one port supported when forwarding to stdout")
			}
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			if targetNS != "" {
				ns = targetNS
			}
			open := func(p forwardedPort) opener {
				return func(ctx context.Context) (*kvclient.Conn, error) {
					return c.Stream(ctx, ns, resource, name, nil, "portforward", strconv.Itoa(p.remote), p.protocol)
				}
			}
			if stdio {
				conn, err := open(ports[0])(cmd.Context())
				if err != nil {
					return err
				}
				defer conn.Close()
				return pipe(cmd.Context(), conn, cmd.InOrStdin(), out(cmd))
			}
			return forward(cmd.Context(), address, ports, open, out(cmd), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "--address=: Set this to the address the local ports should be opened on")
	cmd.Flags().StringVar(&protocol, "protocol", "tcp", "--protocol=tcp: Protocol of the ports given without a protocol/ prefix (tcp or udp)")
	cmd.Flags().BoolVar(&stdio, "stdio", false, "--stdio=true: Set this to true to forward the tunnel to stdout/stdin; Only works with a single port")
	return cmd
}

// forward listens on every port, then serves them until ctx ends.
func forward(ctx context.Context, address string, ports []forwardedPort, open func(forwardedPort) opener, stdout, stderr io.Writer) error {
	// The listeners close when ctx ends; a failed listen ends it before waiting for the others.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, p := range ports {
		hostPort := net.JoinHostPort(address, strconv.Itoa(p.local))
		var lnAddr net.Addr
		var serve func()
		if p.protocol == "udp" {
			pc, err := net.ListenPacket("udp", hostPort)
			if err != nil {
				return fmt.Errorf("unable to listen on %s/%s: %w", p.protocol, hostPort, err)
			}
			context.AfterFunc(ctx, func() { pc.Close() })
			lnAddr, serve = pc.LocalAddr(), func() { forwardUDP(ctx, pc, open(p), stderr) }
		} else {
			ln, err := net.Listen("tcp", hostPort)
			if err != nil {
				return fmt.Errorf("unable to listen on %s/%s: %w", p.protocol, hostPort, err)
			}
			context.AfterFunc(ctx, func() { ln.Close() })
			lnAddr, serve = ln.Addr(), func() { forwardTCP(ctx, ln, open(p), stderr) }
		}
		fmt.Fprintf(stdout, "Forwarding from %s -> %d\n", lnAddr, p.remote)
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve()
		}()
	}
	<-ctx.Done()
	return nil
}

// forwardTCP gives every accepted connection its own stream.
func forwardTCP(ctx context.Context, ln net.Listener, open opener, stderr io.Writer) {
	for {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			stream, err := open(ctx)
			if err != nil {
				fmt.Fprintf(stderr, "error handling connection for %s: %v\n", ln.Addr(), err)
				client.Close()
				return
			}
			stop := context.AfterFunc(ctx, func() {
				client.Close()
				stream.Close()
			})
			kvclient.Splice(client, stream)
			stop()
		}()
	}
}

// forwardUDP gives every local peer address its own stream, one datagram per message.
func forwardUDP(ctx context.Context, pc net.PacketConn, open opener, stderr io.Writer) {
	var mu sync.Mutex
	sessions := map[string]*kvclient.Conn{}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range sessions {
			s.Close()
		}
	}()
	drop := func(key string, s *kvclient.Conn) {
		mu.Lock()
		if sessions[key] == s {
			delete(sessions, key)
		}
		mu.Unlock()
		s.Close()
	}
	buf := make([]byte, 64<<10)
	for {
		n, peer, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		key := peer.String()
		mu.Lock()
		s := sessions[key]
		mu.Unlock()
		if s == nil {
			if s, err = open(ctx); err != nil {
				fmt.Fprintf(stderr, "error handling datagrams from %s: %v\n", key, err)
				continue
			}
			mu.Lock()
			sessions[key] = s
			mu.Unlock()
			go func() {
				defer drop(key, s)
				for {
					msg, err := s.ReadMessage()
					if err != nil {
						return
					}
					if _, err := pc.WriteTo(msg, peer); err != nil {
						return
					}
				}
			}()
		}
		if _, err := s.Write(buf[:n]); err != nil {
			drop(key, s)
		}
	}
}

// pipe joins a stream to stdin/stdout (--stdio, e.g. as an ssh ProxyCommand).
func pipe(ctx context.Context, conn io.ReadWriteCloser, in io.Reader, out io.Writer) error {
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(out, conn)
		done <- err
	}()
	go func() {
		_, err := io.Copy(conn, in)
		done <- err
	}()
	select {
	case <-ctx.Done():
		return nil
	case err := <-done:
		return err
	}
}
