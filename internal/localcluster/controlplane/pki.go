package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/qvirt/qvirt/internal/pki"
)

// The service CIDR of the cluster and the ClusterIP of the default/kubernetes Service in it.
const (
	ServiceCIDR  = "10.96.0.0/16"
	apiServiceIP = "10.96.0.1"
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 365 * 24 * time.Hour
)

// The files under Dir/pki. Pairs are <name>.crt and <name>.key.
const (
	caName                = "ca"
	frontProxyCAName      = "front-proxy-ca"
	apiServerName         = "apiserver"
	kubeletClientName     = "apiserver-kubelet-client"
	frontProxyClientName  = "front-proxy-client"
	adminName             = "admin"
	schedulerClientName   = "kube-scheduler-client"
	schedulerServingName  = "kube-scheduler-serving"
	controllerClientName  = "kube-controller-manager-client"
	controllerServingName = "kube-controller-manager-serving"
	serviceAccountKey     = "sa.key"
	serviceAccountPub     = "sa.pub"
)

// clusterPKI is the control plane's certificates: two CAs (cluster and front proxy), a leaf pair per
// component, and the service-account signing key.
type clusterPKI struct {
	dir              string
	ca, frontProxyCA *pki.CA
}

func (p *clusterPKI) path(name string) string { return filepath.Join(p.dir, name) }

// newPKI loads or creates the CAs and the service-account key in dir, and issues fresh leaf
// certificates for every component. Keeping the CAs across restarts keeps kubeconfigs and user
// certificates handed out earlier valid.
func newPKI(dir string, bind net.IP) (*clusterPKI, error) {
	p := &clusterPKI{dir: dir}
	var err error
	if p.ca, err = loadOrCreateCA(dir, caName, "qvirt-local-ca"); err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	if p.frontProxyCA, err = loadOrCreateCA(dir, frontProxyCAName, "qvirt-local-front-proxy-ca"); err != nil {
		return nil, fmt.Errorf("front-proxy CA: %w", err)
	}
	if err := p.ensureServiceAccountKey(); err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
	leaves := []struct {
		name string
		ca   *pki.CA
		req  pki.Request
	}{
		{apiServerName, p.ca, pki.Request{
			CommonName: "kube-apiserver",
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local"},
			IPs:    append([]net.IP{net.ParseIP(apiServiceIP), bind}, loopback...),
			Server: true,
		}},
		{adminName, p.ca, pki.Request{CommonName: "qvirt-admin", Organization: []string{"system:masters"}, Client: true}},
		{schedulerClientName, p.ca, pki.Request{CommonName: "system:kube-scheduler", Client: true}},
		{controllerClientName, p.ca, pki.Request{CommonName: "system:kube-controller-manager", Client: true}},
		{schedulerServingName, p.ca, pki.Request{CommonName: "kube-scheduler", DNSNames: []string{"localhost"}, IPs: loopback, Server: true}},
		{controllerServingName, p.ca, pki.Request{CommonName: "kube-controller-manager", DNSNames: []string{"localhost"}, IPs: loopback, Server: true}},
		// kube-apiserver's identity towards the kubelets (logs, exec, port-forward).
		{kubeletClientName, p.ca, pki.Request{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true}},
		{frontProxyClientName, p.frontProxyCA, pki.Request{CommonName: "front-proxy-client", Client: true}},
	}
	for _, l := range leaves {
		l.req.Lifetime = leafLifetime
		pair, err := l.ca.Sign(l.req)
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", l.name, err)
		}
		if _, _, err := pair.Write(dir, l.name); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// issueClient signs a client certificate for user in groups with the cluster CA.
func (p *clusterPKI) issueClient(user string, groups []string) (pki.KeyPair, error) {
	return p.ca.Sign(pki.Request{CommonName: user, Organization: groups, Client: true, Lifetime: leafLifetime})
}

func (p *clusterPKI) read(name string) (pki.KeyPair, error) {
	certPEM, err := os.ReadFile(p.path(name + ".crt"))
	if err != nil {
		return pki.KeyPair{}, err
	}
	keyPEM, err := os.ReadFile(p.path(name + ".key"))
	if err != nil {
		return pki.KeyPair{}, err
	}
	return pki.KeyPair{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

func loadOrCreateCA(dir, name, commonName string) (*pki.CA, error) {
	certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	ca, err := loadCA(certFile, keyFile)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return ca, err
	}
	if ca, err = pki.NewCA(commonName, caLifetime); err != nil {
		return nil, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := pki.WriteFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return ca, pki.WriteFileAtomic(certFile, ca.CertPEM(), 0o644)
}

func loadCA(certFile, keyFile string) (*pki.CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	if block, _ = pem.Decode(keyPEM); block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: no PKCS#8 PEM key", keyFile)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: key of type %T cannot sign", keyFile, key)
	}
	return &pki.CA{Cert: cert, Key: signer}, nil
}

func (p *clusterPKI) ensureServiceAccountKey() error {
	_, keyErr := os.Stat(p.path(serviceAccountKey))
	_, pubErr := os.Stat(p.path(serviceAccountPub))
	if keyErr == nil && pubErr == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(p.path(serviceAccountKey), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return pki.WriteFileAtomic(p.path(serviceAccountPub), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

// IssueServing signs a serving certificate with the cluster CA, which kube-apiserver trusts for
// kubelets (--kubelet-certificate-authority).
func (c *Cluster) IssueServing(commonName string, dnsNames []string, ips []net.IP) (pki.KeyPair, error) {
	return c.pki.ca.Sign(pki.Request{CommonName: commonName, DNSNames: dnsNames, IPs: ips, Server: true, Lifetime: leafLifetime})
}

// APIServerAddress is the host:port kube-apiserver listens on.
func (c *Cluster) APIServerAddress() string {
	return net.JoinHostPort(c.bind.String(), fmt.Sprint(c.ports.apiServer))
}
