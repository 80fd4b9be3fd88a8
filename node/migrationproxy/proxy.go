// Package migrationproxy carries a migration's streams between the node agents of its source
// and target nodes, in KubeVirt's migration-proxy shape: at each end a unix socket in the VM's
// directory, the only thing the launchers' QEMUs connect to; between the nodes mutual TLS with
// the nodes' own certificates, so a stream is never plain TCP between pods and only the
// migration's source node can write into its target.
package migrationproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// HandshakeTimeout bounds a TLS handshake between the nodes.
const HandshakeTimeout = 10 * time.Second

// Target serves one stream of a migration on its target node: it accepts TLS connections
// from the source node on a TCP port and forwards each to the target launcher's unix socket.
type Target struct {
	l     net.Listener
	dial  DialFunc
	log   logr.Logger
	conns tracker
}

// DialFunc connects to a launcher's migration socket.
type DialFunc func(ctx context.Context) (net.Conn, error)

// DialUnix dials the socket at path.
func DialUnix(path string) DialFunc {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

// ListenTarget listens on addr (host:0 picks a port) and forwards each stream to what dial
// reaches. cfg must hold the target node's certificate and require a client certificate; only
// a peer whose certificate is issued to sourceNode (its common name) is served.
func ListenTarget(addr string, cfg *tls.Config, sourceNode string, dial DialFunc, log logr.Logger) (*Target, error) {
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		return nil, errors.New("migration proxy: the target must verify the source's certificate")
	}
	cfg = cfg.Clone()
	cfg.VerifyConnection = requirePeer(sourceNode)
	l, err := tls.Listen("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	t := &Target{l: l, dial: dial, log: log}
	go t.serve()
	return t, nil
}

// Addr is where the source dials.
func (t *Target) Addr() *net.TCPAddr { return t.l.Addr().(*net.TCPAddr) }

// Close stops accepting and ends the streams in flight.
func (t *Target) Close() error {
	err := t.l.Close()
	t.conns.closeAll()
	return err
}

func (t *Target) serve() {
	for {
		c, err := t.l.Accept()
		if err != nil {
			return
		}
		go t.forward(c.(*tls.Conn))
	}
}

func (t *Target) forward(in *tls.Conn) {
	defer in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	err := in.HandshakeContext(ctx)
	cancel()
	if err != nil {
		t.log.Info("migration stream refused", "peer", in.RemoteAddr().String(), "reason", err.Error())
		return
	}
	dctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	out, err := t.dial(dctx)
	cancel()
	if err != nil {
		t.log.Error(err, "the target launcher's migration socket")
		return
	}
	defer out.Close()
	u, ok := out.(halfCloser)
	if !ok {
		t.log.Error(nil, "the target launcher's migration socket cannot be half-closed")
		return
	}
	t.conns.add(in, out)
	defer t.conns.remove(in, out)
	splice(in, u)
}

// Source serves one stream of a migration on its source node: the source launcher's QEMU
// connects to its unix socket, and each connection goes on to the target over TLS.
type Source struct {
	l      net.Listener
	target string
	cfg    *tls.Config
	log    logr.Logger
	conns  tracker
}

// NewSource serves l (the unix socket QEMU migrates to) and dials targetAddr for each
// connection. cfg must hold the source node's certificate and the CA of node certificates; the
// target must present a certificate for targetNode.
func NewSource(l net.Listener, targetAddr, targetNode string, cfg *tls.Config, log logr.Logger) (*Source, error) {
	if len(cfg.Certificates) == 0 && cfg.GetClientCertificate == nil {
		return nil, errors.New("migration proxy: the source needs its node's certificate")
	}
	cfg = cfg.Clone()
	cfg.ServerName = targetNode
	s := &Source{l: l, target: targetAddr, cfg: cfg, log: log}
	go s.serve()
	return s, nil
}

// Close stops accepting, ends the streams in flight and removes the socket.
func (s *Source) Close() error {
	err := s.l.Close()
	s.conns.closeAll()
	return err
}

func (s *Source) serve() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		go s.forward(c.(*net.UnixConn))
	}
}

func (s *Source) forward(in *net.UnixConn) {
	defer in.Close()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: HandshakeTimeout}, Config: s.cfg}
	ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	c, err := d.DialContext(ctx, "tcp", s.target)
	cancel()
	if err != nil {
		s.log.Error(err, "dialing the migration target", "target", s.target, "node", s.cfg.ServerName)
		return
	}
	out := c.(*tls.Conn)
	defer out.Close()
	s.conns.add(in, out)
	defer s.conns.remove(in, out)
	splice(out, in)
}

// halfCloser is a stream that can end its writing half alone (TLS and unix sockets).
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// splice copies both ways until both directions have ended, passing each end-of-stream on
// as a half-close so QEMU sees the peer finish.
func splice(t, u halfCloser) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(t, u)
		_ = t.CloseWrite()
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(u, t)
		_ = u.CloseWrite()
	}()
	wg.Wait()
}

// requirePeer accepts only a client certificate issued to node (the chain is verified by the
// TLS stack first).
func requirePeer(node string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("migration proxy: a client certificate is required")
		}
		if cn := cs.PeerCertificates[0].Subject.CommonName; cn != node {
			return fmt.Errorf("migration proxy: certificate of %q refused, only the migration's source node %q may connect", cn, node)
		}
		return nil
	}
}

// tracker holds the connections of the streams in flight, so Close can end them.
type tracker struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (t *tracker) add(cs ...net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns == nil {
		t.conns = map[net.Conn]struct{}{}
	}
	for _, c := range cs {
		t.conns[c] = struct{}{}
	}
}

func (t *tracker) remove(cs ...net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range cs {
		delete(t.conns, c)
	}
}

func (t *tracker) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.conns {
		_ = c.Close()
	}
}
