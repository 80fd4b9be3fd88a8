package controlplane

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parseCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM data", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestPKIChains(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, net.ParseIP("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	pool := func(name string) *x509.CertPool {
		pool := x509.NewCertPool()
		pool.AddCert(parseCert(t, p.path(name+".crt")))
		return pool
	}
	cluster, frontProxy := pool(caName), pool(frontProxyCAName)

	apiServer := parseCert(t, p.path(apiServerName+".crt"))
	for _, name := range []string{"localhost", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", apiServiceIP} {
		if _, err := apiServer.Verify(x509.VerifyOptions{Roots: cluster, DNSName: name}); err != nil {
			t.Errorf("apiserver certificate for %s: %v", name, err)
		}
	}

	clients := []struct {
		name, cn, org string
		roots         *x509.CertPool
	}{
		{adminName, "qvirt-admin", "system:masters", cluster},
		{schedulerClientName, "system:kube-scheduler", "", cluster},
		{controllerClientName, "system:kube-controller-manager", "", cluster},
		{frontProxyClientName, "front-proxy-client", "", frontProxy},
	}
	for _, c := range clients {
		cert := parseCert(t, p.path(c.name+".crt"))
		if _, err := cert.Verify(x509.VerifyOptions{Roots: c.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if cert.Subject.CommonName != c.cn || strings.Join(cert.Subject.Organization, ",") != c.org {
			t.Errorf("%s: subject %v, want CN=%s O=%s", c.name, cert.Subject, c.cn, c.org)
		}
	}
	// The front-proxy client must not pass as an ordinary client, or anyone holding it could skip RBAC.
	fp := parseCert(t, p.path(frontProxyClientName+".crt"))
	if _, err := fp.Verify(x509.VerifyOptions{Roots: cluster, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("front-proxy client certificate verifies against the cluster CA")
	}

	// A restart on the same directory keeps the CAs and the service-account key.
	before := map[string][]byte{}
	for _, f := range []string{caName + ".crt", frontProxyCAName + ".crt", serviceAccountKey} {
		before[f], _ = os.ReadFile(p.path(f))
	}
	if _, err := newPKI(dir, net.ParseIP("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	for f, data := range before {
		after, _ := os.ReadFile(filepath.Join(dir, f))
		if !bytes.Equal(data, after) {
			t.Errorf("%s changed on restart", f)
		}
	}
}

func TestStartWithoutBinaries(t *testing.T) {
	_, err := Start(context.Background(), Options{Dir: t.TempDir(), BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "make k8s") {
		t.Fatalf("Start without binaries: %v, want an error naming `make k8s`", err)
	}
}
