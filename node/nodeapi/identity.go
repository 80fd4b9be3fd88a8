package nodeapi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
)

// SignerName is the certificates.k8s.io signer that issues node agents' serving certificates.
// virt-controller approves a request for it only from the node agent running on the node named
// in it, so a node agent cannot obtain another node's identity.
const SignerName = "kubevirt.io/virt-handler-serving"

// DefaultClientIdentity is the common name of the client certificate virt-api presents; the
// node API refuses every other certificate, even one signed by the same CA.
const DefaultClientIdentity = "virt-api"

// ServerName is the DNS name in the serving certificate of the node agent on node, and the name
// virt-api verifies when it dials that node.
func ServerName(node string) string { return node }

// Endpoint is where virt-api reaches the node agent of one node.
type Endpoint struct {
	// URL is https://host:port, as the node agent advertises it on its Node.
	URL string
	// Node is the node's name; the agent's certificate must be issued for it.
	Node string
}

// ParseEndpoint checks an advertised endpoint: https, a host and a port, nothing else. The value
// comes from a Node annotation, so it is not trusted to choose a scheme or a path.
func ParseEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("node agent endpoint %q: %v", raw, err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("node agent endpoint %q: scheme %q refused, only https is accepted", raw, u.Scheme)
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("node agent endpoint %q: only https://host:port is accepted", raw)
	}
	if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" {
		return nil, fmt.Errorf("node agent endpoint %q: host:port expected", raw)
	}
	u.Path = ""
	return u, nil
}

// RequireClientIdentity returns a tls.Config.VerifyConnection that accepts only client
// certificates whose common name is one of names (the chain is verified by the TLS stack first).
func RequireClientIdentity(names ...string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("node API: a client certificate is required")
		}
		cn := cs.PeerCertificates[0].Subject.CommonName
		if !slices.Contains(names, cn) {
			return fmt.Errorf("node API: client certificate %q refused, only %v may call it", cn, names)
		}
		return nil
	}
}
