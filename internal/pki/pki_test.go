package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"
)

func TestSignedCertsVerifyAgainstCA(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Sign(Request{CommonName: "srv", DNSNames: []string{"virt-api.kubevirt.svc"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := kp.Write(dir, "srv")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "virt-api.kubevirt.svc"}); err != nil {
		t.Errorf("server cert does not verify: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a server-only certificate verified for client auth")
	}
	other, _ := NewCA("other", time.Hour)
	pool2 := x509.NewCertPool()
	pool2.AddCert(other.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool2}); err == nil {
		t.Error("verified against the wrong CA")
	}
}
