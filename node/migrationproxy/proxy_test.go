package migrationproxy

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/qvirt/qvirt/internal/pki"
)

// nodeCerts issues node certificates (server and client use, named as the node) from one CA.
type nodeCerts struct {
	t    *testing.T
	ca   *pki.CA
	pool *x509.CertPool
}

func newNodeCerts(t *testing.T) *nodeCerts {
	ca, err := pki.NewCA("node-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &nodeCerts{t: t, ca: ca, pool: pool}
}

func (n *nodeCerts) cert(node string) tls.Certificate {
	kp, err := n.ca.Sign(pki.Request{CommonName: node, DNSNames: []string{node}, Server: true, Client: true})
	if err != nil {
		n.t.Fatal(err)
	}
	c, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// targetConfig is the target node's side: its certificate, node certificates required.
func (n *nodeCerts) targetConfig(node string) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{n.cert(node)}, ClientCAs: n.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

// sourceConfig is the source node's side: its certificate, node certificates trusted.
func (n *nodeCerts) sourceConfig(node string) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{n.cert(node)}, RootCAs: n.pool, MinVersion: tls.VersionTLS13}
}

// echoSocket is a unix server that sends back what it reads, until the peer half-closes.
func echoSocket(t *testing.T) (string, <-chan struct{}) {
	path := filepath.Join(t.TempDir(), "launcher-migration.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return path, accepted
}

// pipe starts a target proxy and a source proxy in front of an echoing launcher socket. The
// source presents a certificate of srcName and expects expectTarget; the target presents one
// of targetName and serves only expectSource.
func pipe(t *testing.T, certs *nodeCerts, srcName, targetName, expectSource, expectTarget string) (string, <-chan struct{}) {
	launcherSock, accepted := echoSocket(t)
	tgt, err := ListenTarget("127.0.0.1:0", certs.targetConfig(targetName), expectSource, DialUnix(launcherSock), testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tgt.Close() })
	srcSock := filepath.Join(t.TempDir(), "source-migration.sock")
	srcL, err := net.Listen("unix", srcSock)
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(srcL, tgt.Addr().String(), expectTarget, certs.sourceConfig(srcName), testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return srcSock, accepted
}

func roundTrip(t *testing.T, sock string, payload []byte) ([]byte, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() {
		_, _ = c.Write(payload)
		_ = c.(*net.UnixConn).CloseWrite()
	}()
	return io.ReadAll(c)
}

func TestAStreamCrossesTheProxyBothWays(t *testing.T) {
	certs := newNodeCerts(t)
	sock, accepted := pipe(t, certs, "node-a", "node-b", "node-a", "node-b")
	payload := make([]byte, 8<<20)
	_, _ = rand.Read(payload)
	got, err := roundTrip(t, sock, payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("got %d bytes back, sent %d (equal: %v)", len(got), len(payload), bytes.Equal(got, payload))
	}
	if len(accepted) != 1 {
		t.Errorf("the launcher's socket got %d connections, want 1", len(accepted))
	}
}

func TestTheTargetServesOnlyTheSourceNode(t *testing.T) {
	certs := newNodeCerts(t)
	// node-c holds a valid node certificate, but the migration is node-a's.
	sock, accepted := pipe(t, certs, "node-c", "node-b", "node-a", "node-b")
	got, _ := roundTrip(t, sock, []byte("guest memory"))
	if len(got) != 0 || len(accepted) != 0 {
		t.Fatalf("another node's stream reached the launcher: %q back, %d connections", got, len(accepted))
	}
}

func TestTheSourceSendsOnlyToTheTargetNode(t *testing.T) {
	certs := newNodeCerts(t)
	// The listener at the target's address holds node-x's certificate, not node-b's.
	sock, accepted := pipe(t, certs, "node-a", "node-x", "node-a", "node-b")
	got, _ := roundTrip(t, sock, []byte("guest memory"))
	if len(got) != 0 || len(accepted) != 0 {
		t.Fatalf("the stream went to another node: %q back, %d connections", got, len(accepted))
	}
}

func TestATargetWithoutClientVerificationIsRefused(t *testing.T) {
	certs := newNodeCerts(t)
	cfg := certs.targetConfig("node-b")
	cfg.ClientAuth = tls.RequestClientCert
	if _, err := ListenTarget("127.0.0.1:0", cfg, "node-a", DialUnix("/nowhere"), testr.New(t)); err == nil {
		t.Fatal("a target that does not verify its peer was started")
	}
}
