package nodecerts

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/qvirt/qvirt/internal/pki"
)

func TestSignedCertificatesCarryTheUsagesAskedFor(t *testing.T) {
	ca, err := pki.NewCA("node-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(ca.CertPEM(), key)
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{CA: func() (*tls.Certificate, error) { return &pair, nil }}
	for name, tc := range map[string]struct {
		usages []certificatesv1.KeyUsage
		want   []x509.ExtKeyUsage
	}{
		"serving only":         {[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		"serving and a client": {[]certificatesv1.KeyUsage{certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
	} {
		csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Request: request(t, "node-a", []string{"node-a"}, nil), Usages: tc.usages}}
		out, err := r.sign(csr)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(out)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cert.ExtKeyUsage, tc.want) {
			t.Errorf("%s: extended usages %v, want %v", name, cert.ExtKeyUsage, tc.want)
		}
	}
}
