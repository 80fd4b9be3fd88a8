// Package servingcert obtains the node agent's serving certificate from the cluster: a
// certificates.k8s.io request for this node's name, signed by virt-controller once it has
// checked that the request comes from the node agent running on that node. The certificate is
// renewed before it expires; the key never leaves the process.
package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"

	"github.com/qvirt/qvirt/node/nodeapi"
)

// Options configure the certificate request.
type Options struct {
	Kube     kubernetes.Interface
	NodeName string
	// Lifetime is the certificate lifetime asked for (the signer may shorten it).
	Lifetime time.Duration
}

// Source serves the current certificate to a TLS server.
type Source struct {
	mgr certificate.Manager
}

// Start requests the certificate and returns once one is issued (or ctx ends). Renewal runs
// until ctx ends.
func Start(ctx context.Context, o Options) (*Source, error) {
	if o.Lifetime == 0 {
		o.Lifetime = 24 * time.Hour
	}
	name := nodeapi.ServerName(o.NodeName)
	mgr, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return o.Kube, nil },
		Template: &x509.CertificateRequest{
			Subject:  pkix.Name{CommonName: name},
			DNSNames: []string{name},
		},
		SignerName:                   nodeapi.SignerName,
		RequestedCertificateLifetime: &o.Lifetime,
		Usages: []certificatesv1.KeyUsage{
			certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth,
		},
		CertificateStore: &memoryStore{},
		Name:             "node API serving certificate",
		Ctx:              &ctx,
	})
	if err != nil {
		return nil, err
	}
	mgr.Start()
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		return mgr.Current() != nil, nil
	})
	if err != nil {
		mgr.Stop()
		return nil, fmt.Errorf("waiting for the node API serving certificate for %s (signer %s): %w", name, nodeapi.SignerName, err)
	}
	return &Source{mgr: mgr}, nil
}

// GetCertificate is a tls.Config.GetCertificate.
func (s *Source) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.mgr.Current(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no node API serving certificate")
}

// memoryStore keeps the pair in memory: a restarted agent asks for a new certificate rather
// than keeping a key on the node's disk.
type memoryStore struct {
	mu   sync.Mutex
	cert *tls.Certificate
}

func (m *memoryStore) Current() (*tls.Certificate, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cert == nil {
		e := certificate.NoCertKeyError("no certificate issued yet")
		return nil, &e
	}
	return m.cert, nil
}

func (m *memoryStore) Update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil && len(c.Certificate) > 0 {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cert = &c
	return &c, nil
}
