// Package tlsfiles serves TLS certificates read from files and picks up new files without a
// restart: certificates are rotated on disk (by the operator or by hand) and the next
// handshake uses them.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// checkEvery bounds how often the files are stat'ed; handshakes in between reuse the cache.
const checkEvery = time.Second

// KeyPair is a certificate and key on disk, reloaded when either file changes.
type KeyPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

// NewKeyPair loads the pair once, so a bad path fails at start-up rather than at first use.
func NewKeyPair(certFile, keyFile string) (*KeyPair, error) {
	kp := &KeyPair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.Certificate(); err != nil {
		return nil, err
	}
	return kp, nil
}

// Certificate returns the current certificate, reloading it if the files changed. If a reload
// fails (e.g. the files are mid-rotation) the previous certificate stays in use.
func (kp *KeyPair) Certificate() (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.cert != nil && time.Since(kp.checked) < checkEvery {
		return kp.cert, nil
	}
	kp.checked = time.Now()
	stamp, err := stampOf(kp.certFile, kp.keyFile)
	if err != nil {
		if kp.cert != nil {
			return kp.cert, nil
		}
		return nil, err
	}
	if kp.cert != nil && stamp == kp.stamp {
		return kp.cert, nil
	}
	c, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		if kp.cert != nil {
			return kp.cert, nil
		}
		return nil, fmt.Errorf("load key pair %s: %w", kp.certFile, err)
	}
	kp.cert, kp.stamp = &c, stamp
	return kp.cert, nil
}

// GetCertificate fits tls.Config.GetCertificate.
func (kp *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return kp.Certificate()
}

// GetClientCertificate fits tls.Config.GetClientCertificate.
func (kp *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return kp.Certificate()
}

func stampOf(files ...string) (string, error) {
	var s string
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return s, nil
}

// CAPool is a CA bundle on disk, reloaded when it changes.
type CAPool struct {
	file string

	mu      sync.Mutex
	pool    *x509.CertPool
	stamp   string
	checked time.Time
}

// NewCAPool loads the bundle once.
func NewCAPool(file string) (*CAPool, error) {
	p := &CAPool{file: file}
	if _, err := p.Pool(); err != nil {
		return nil, err
	}
	return p, nil
}

// Pool returns the current pool; a failed reload keeps the previous one.
func (p *CAPool) Pool() (*x509.CertPool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pool != nil && time.Since(p.checked) < checkEvery {
		return p.pool, nil
	}
	p.checked = time.Now()
	stamp, err := stampOf(p.file)
	if err == nil && p.pool != nil && stamp == p.stamp {
		return p.pool, nil
	}
	var pem []byte
	if err == nil {
		pem, err = os.ReadFile(p.file)
	}
	pool := x509.NewCertPool()
	if err == nil && !pool.AppendCertsFromPEM(pem) {
		err = fmt.Errorf("%s holds no PEM certificates", p.file)
	}
	if err != nil {
		if p.pool != nil {
			return p.pool, nil
		}
		return nil, err
	}
	p.pool, p.stamp = pool, stamp
	return p.pool, nil
}

// ServerConfig is a TLS server config serving getCert's certificate (KeyPair.GetCertificate
// follows the files). With clientCAs set, clients must present a certificate signed by one of
// them (mutual TLS).
func ServerConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), clientCAs *CAPool) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert}
	if clientCAs == nil {
		// Clients may still present a certificate; the handler verifies it (aggregation layer).
		cfg.ClientAuth = tls.RequestClientCert
		return cfg
	}
	// Re-read the CA on every handshake so a rotated CA applies to new connections.
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := clientCAs.Pool()
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.GetConfigForClient = nil
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = pool
		return c, nil
	}
	return cfg
}

// ClientConfig is a TLS client config presenting kp and trusting rootCAs, checking the
// server's name against serverName.
func ClientConfig(kp *KeyPair, rootCAs *CAPool, serverName string) (*tls.Config, error) {
	pool, err := rootCAs.Pool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetClientCertificate: kp.GetClientCertificate, RootCAs: pool, ServerName: serverName}, nil
}
