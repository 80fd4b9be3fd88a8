// Package nodeapitest runs the node API over mutual TLS in tests, with a fake backend that
// stands in for a node agent: an echoing console, a VNC server that greets with RFB, and a
// record of the commands it received.
package nodeapitest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/httplimit"
	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/internal/tlsfiles"
	"github.com/qvirt/qvirt/node/nodeapi"
)

// Fake is a Backend for tests. VMIs not in Known are reported as not on this node.
type Fake struct {
	mu       sync.Mutex
	Known    map[nodeapi.VMI]bool
	Paused   map[nodeapi.VMI]bool
	Received []string
	vncOpen  map[nodeapi.VMI]io.Closer
	// PNG is what Screenshot returns.
	PNG []byte
	// Agent is what GuestAgent returns (nil: no agent connected).
	Agent *v1.VirtualMachineInstanceGuestAgentInfo
	// OpenConsole, when set, opens consoles instead of the echo.
	OpenConsole func(nodeapi.VMI) (io.ReadWriteCloser, error)
	// BeforeCommand, when set, runs before each command; a test can hold commands there.
	BeforeCommand func(context.Context, nodeapi.VMI, nodeapi.Command)
}

// NewFake knows the given VMIs.
func NewFake(vmis ...nodeapi.VMI) *Fake {
	f := &Fake{Known: map[nodeapi.VMI]bool{}, Paused: map[nodeapi.VMI]bool{}, vncOpen: map[nodeapi.VMI]io.Closer{},
		PNG: []byte("\x89PNG\r\n\x1a\nfake")}
	for _, v := range vmis {
		f.Known[v] = true
	}
	return f
}

func (f *Fake) check(vmi nodeapi.VMI, what string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Received = append(f.Received, what+" "+vmi.String())
	if !f.Known[vmi] {
		return fmt.Errorf("%w: %s", nodeapi.ErrNotFound, vmi)
	}
	return nil
}

// Commands returns what the fake was asked, in order.
func (f *Fake) Commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.Received...)
}

// Console echoes every byte back, as a terminal in echo mode would.
func (f *Fake) Console(_ context.Context, vmi nodeapi.VMI) (io.ReadWriteCloser, error) {
	if err := f.check(vmi, "console"); err != nil {
		return nil, err
	}
	if f.OpenConsole != nil {
		return f.OpenConsole(vmi)
	}
	a, b := net.Pipe()
	go func() {
		_, _ = io.Copy(b, b)
		b.Close()
	}()
	return a, nil
}

// VNC greets like a VNC server and keeps one session per VMI.
func (f *Fake) VNC(_ context.Context, vmi nodeapi.VMI, preserve bool) (io.ReadWriteCloser, error) {
	if err := f.check(vmi, "vnc"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if old := f.vncOpen[vmi]; old != nil {
		if preserve {
			return nil, fmt.Errorf("%w: a VNC session is open", nodeapi.ErrSessionBusy)
		}
		old.Close()
	}
	a, b := net.Pipe()
	f.vncOpen[vmi] = b
	go func() {
		_, _ = b.Write([]byte("RFB 003.008\n"))
		_, _ = io.Copy(io.Discard, b)
		f.mu.Lock()
		if f.vncOpen[vmi] == b {
			delete(f.vncOpen, vmi)
		}
		f.mu.Unlock()
	}()
	return a, nil
}

// PortForward answers like an HTTP server on the guest.
func (f *Fake) PortForward(_ context.Context, vmi nodeapi.VMI, port int, protocol string) (io.ReadWriteCloser, error) {
	if err := f.check(vmi, fmt.Sprintf("portforward %d/%s", port, protocol)); err != nil {
		return nil, err
	}
	a, b := net.Pipe()
	go func() {
		buf := make([]byte, 4096)
		_, _ = b.Read(buf)
		_, _ = fmt.Fprintf(b, "HTTP/1.0 200 OK\r\n\r\nguest %s port %d\n", vmi.Name, port)
		b.Close()
	}()
	return a, nil
}

// VSOCK echoes what it reads, prefixed by the port once.
func (f *Fake) VSOCK(_ context.Context, vmi nodeapi.VMI, port uint32) (io.ReadWriteCloser, error) {
	if err := f.check(vmi, fmt.Sprintf("vsock %d", port)); err != nil {
		return nil, err
	}
	a, b := net.Pipe()
	go func() {
		_, _ = fmt.Fprintf(b, "vsock %d\n", port)
		_, _ = io.Copy(b, b)
		b.Close()
	}()
	return a, nil
}

func (f *Fake) Screenshot(_ context.Context, vmi nodeapi.VMI) ([]byte, error) {
	if err := f.check(vmi, "screenshot"); err != nil {
		return nil, err
	}
	return f.PNG, nil
}

// GuestAgent answers with Agent, or a conflict when it is nil.
func (f *Fake) GuestAgent(_ context.Context, vmi nodeapi.VMI) (*v1.VirtualMachineInstanceGuestAgentInfo, error) {
	if err := f.check(vmi, "guestagent"); err != nil {
		return nil, err
	}
	if f.Agent == nil {
		return nil, fmt.Errorf("%w: VMI does not have guest agent connected", nodeapi.ErrConflict)
	}
	return f.Agent, nil
}

// Command tracks pause state so pause/unpause conflicts can be tested.
func (f *Fake) Command(ctx context.Context, vmi nodeapi.VMI, cmd nodeapi.Command) error {
	if err := f.check(vmi, string(cmd)); err != nil {
		return err
	}
	if f.BeforeCommand != nil {
		f.BeforeCommand(ctx, vmi, cmd)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch cmd {
	case nodeapi.Pause:
		if f.Paused[vmi] {
			return fmt.Errorf("%w: VMI is already paused", nodeapi.ErrConflict)
		}
		f.Paused[vmi] = true
	case nodeapi.Unpause:
		if !f.Paused[vmi] {
			return fmt.Errorf("%w: VMI is not paused", nodeapi.ErrConflict)
		}
		f.Paused[vmi] = false
	}
	return nil
}

// Flood is a console that writes without pause, as a guest printing endlessly does. closed
// is closed once the stream is: by the server, when it gives up on a client that stopped
// reading.
func Flood() (stream io.ReadWriteCloser, closed <-chan struct{}) {
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer b.Close()
		go func() { _, _ = io.Copy(io.Discard, b) }()
		line := []byte("all work and no play makes Jack a dull boy\r\n")
		for {
			if _, err := b.Write(line); err != nil {
				return
			}
		}
	}()
	return a, done
}

// Env is a node API server with its PKI.
type Env struct {
	Endpoint nodeapi.Endpoint
	Client   *nodeapi.Client
	// Files a virt-api would be configured with.
	CAFile, ClientCertFile, ClientKeyFile string
	// CA signed both sides' certificates.
	CA *pki.CA
}

// NodeName is the node the server's certificate is issued for.
const NodeName = "node-1"

// Start serves backend over mutual TLS on loopback, within the node API's default limits.
func Start(t testing.TB, backend nodeapi.Backend) *Env {
	t.Helper()
	return StartLimited(t, backend, nodeapi.DefaultLimits())
}

// StartLimited is Start within lim.
func StartLimited(t testing.TB, backend nodeapi.Backend, lim httplimit.Limits) *Env {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("qvirt-test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := ca.Sign(pki.Request{CommonName: "virt-handler", DNSNames: []string{nodeapi.ServerName(NodeName)}, Server: true})
	cli, _ := ca.Sign(pki.Request{CommonName: nodeapi.DefaultClientIdentity, Client: true})
	srvCert, srvKey, err := srv.Write(dir, "handler")
	if err != nil {
		t.Fatal(err)
	}
	cliCert, cliKey, err := cli.Write(dir, "virt-api")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	skp, err := tlsfiles.NewKeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := tlsfiles.NewCAPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tlsfiles.ServerConfig(skp.GetCertificate, pool)
	cfg.VerifyConnection = nodeapi.RequireClientIdentity(nodeapi.DefaultClientIdentity)
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := nodeapi.NewServer(backend, logr.Discard(), lim)
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })

	ckp, err := tlsfiles.NewKeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	client := nodeapi.NewClient(func() (*tls.Config, error) { return tlsfiles.ClientConfig(ckp, pool, "") })
	return &Env{Endpoint: nodeapi.Endpoint{URL: "https://" + l.Addr().String(), Node: NodeName}, Client: client,
		CAFile: caFile, ClientCertFile: cliCert, ClientKeyFile: cliKey, CA: ca}
}
