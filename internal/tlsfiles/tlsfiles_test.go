package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/qvirt/qvirt/internal/pki"
)

func TestServerPicksUpReplacedCertificate(t *testing.T) {
	ca, _ := pki.NewCA("ca", time.Hour)
	dir := t.TempDir()
	issue := func(cn string) {
		kp, err := ca.Sign(pki.Request{CommonName: cn, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := kp.Write(dir, "serving"); err != nil {
			t.Fatal(err)
		}
	}
	issue("first")
	kp, err := NewKeyPair(dir+"/serving.crt", dir+"/serving.key")
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, ServerConfig(kp.GetCertificate, nil), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	servedCN := func() string {
		conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := servedCN(); cn != "first" {
		t.Fatalf("served %q", cn)
	}
	issue("second")
	// The file stamp check runs at most once a second.
	deadline := time.Now().Add(5 * time.Second)
	for servedCN() != "second" {
		if time.Now().After(deadline) {
			t.Fatal("replaced certificate never served")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A broken file mid-rotation keeps the last good certificate.
	if err := os.WriteFile(dir+"/serving.crt", []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if cn := servedCN(); cn != "second" {
		t.Errorf("after a bad file served %q", cn)
	}
}

func TestMutualTLSRequiresClientCert(t *testing.T) {
	ca, _ := pki.NewCA("ca", time.Hour)
	dir := t.TempDir()
	srvKP, _ := ca.Sign(pki.Request{CommonName: "handler", DNSNames: []string{"virt-handler"}, Server: true})
	srvKP.Write(dir, "srv")
	cliKP, _ := ca.Sign(pki.Request{CommonName: "virt-api", Client: true})
	cliKP.Write(dir, "cli")
	if err := os.WriteFile(dir+"/ca.crt", ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	skp, _ := NewKeyPair(dir+"/srv.crt", dir+"/srv.key")
	cas, _ := NewCAPool(dir + "/ca.crt")
	srv := serve(t, ServerConfig(skp.GetCertificate, cas), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(r.TLS.PeerCertificates[0].Subject.CommonName))
	}))

	ckp, _ := NewKeyPair(dir+"/cli.crt", dir+"/cli.key")
	cfg, err := ClientConfig(ckp, cas, "virt-handler")
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	resp.Body.Close()
	noCert := cfg.Clone()
	noCert.GetClientCertificate = nil
	c2 := &http.Client{Transport: &http.Transport{TLSClientConfig: noCert}}
	if resp, err := c2.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Error("a client without a certificate was accepted")
	}
}

type server struct {
	Listener net.Listener
	URL      string
}

// serve runs h behind cfg exactly as the components do (httptest would add its own certificate).
func serve(t *testing.T, cfg *tls.Config, h http.Handler) *server {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ErrorLog: nil}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })
	return &server{Listener: l, URL: "https://" + l.Addr().String()}
}
