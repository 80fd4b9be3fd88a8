package nodecerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
)

func request(t *testing.T, cn string, dns []string, ips []net.IP) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn}, DNSNames: dns, IPAddresses: ips}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestReview(t *testing.T) {
	handler := HandlerUser("kubevirt")
	good := func() *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
			Username: handler,
			Extra:    map[string]certificatesv1.ExtraValue{NodeNameExtra: {"node-a"}},
			Request:  request(t, "node-a", []string{"node-a"}, nil),
			Usages:   []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		}}
	}
	if node, err := Review(good(), handler); err != nil || node != "node-a" {
		t.Fatalf("a request from node-a's agent for node-a: %q, %v", node, err)
	}
	for name, tc := range map[string]struct {
		edit func(*certificatesv1.CertificateSigningRequest)
		want string
	}{
		"another node's name": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, "node-b", []string{"node-b"}, nil)
		}, "node-b"},
		"an extra DNS name": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, "node-a", []string{"node-a", "virt-api.kubevirt.svc"}, nil)
		}, "DNS names"},
		"an IP address": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = request(t, "node-a", []string{"node-a"}, []net.IP{net.ParseIP("10.0.0.1")})
		}, "IP addresses"},
		"another user": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Username = "system:serviceaccount:default:default"
		}, "only the node agent"},
		"a token not bound to a node": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Extra = nil
		}, NodeNameExtra},
		"a usage beyond the node's": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certificatesv1.UsageCodeSigning)
		}, "may not be asked for"},
		"a node named as virt-api's client identity": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Extra = map[string]certificatesv1.ExtraValue{NodeNameExtra: {"virt-api"}}
			c.Spec.Request = request(t, "virt-api", []string{"virt-api"}, nil)
		}, "virt-api's client identity"},
		"no server auth usage": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}
		}, "server auth is required"},
		"garbage request": {func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = []byte("not pem")
		}, "PEM"},
	} {
		t.Run(name, func(t *testing.T) {
			c := good()
			tc.edit(c)
			_, err := Review(c, handler)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a denial mentioning %q, got %v", tc.want, err)
			}
		})
	}
}
