// Package nodecerts signs node agents' serving certificates. A node agent asks for one through
// the certificates.k8s.io API; the request is approved only when it comes from the node agent's
// service account with a token bound to a pod on the very node it names, so one compromised
// node agent cannot obtain another node's identity and intercept that node's consoles.
package nodecerts

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/qvirt/qvirt/node/nodeapi"
)

// NodeNameExtra is where kube-apiserver records the node of the pod a service account token
// is bound to.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// allowedUsages are what a node certificate may be used for: serving the node API and
// /metrics, and identifying the node to another node's agent (client auth).
var allowedUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth,
	certificatesv1.UsageClientAuth,
}

// Review decides a request: it returns the node the certificate is for, or why it is denied.
// handlerUser is the node agent's service account user name.
func Review(csr *certificatesv1.CertificateSigningRequest, handlerUser string) (string, error) {
	if csr.Spec.Username != handlerUser {
		return "", fmt.Errorf("requested by %q; only the node agent (%s) may ask for a node API certificate", csr.Spec.Username, handlerUser)
	}
	nodes := csr.Spec.Extra[NodeNameExtra]
	if len(nodes) != 1 || nodes[0] == "" {
		return "", fmt.Errorf("the requester's token is not bound to a pod on a node (no %s)", NodeNameExtra)
	}
	node := nodes[0]
	if node == nodeapi.DefaultClientIdentity {
		// Its certificate would carry virt-api's client identity, which the node API trusts.
		return "", fmt.Errorf("node %q has the name of virt-api's client identity; it gets no node certificate", node)
	}
	req, err := ParseRequest(csr.Spec.Request)
	if err != nil {
		return "", err
	}
	want := nodeapi.ServerName(node)
	if req.Subject.CommonName != want {
		return "", fmt.Errorf("common name %q: the requester runs on node %s, so only %q may be asked for", req.Subject.CommonName, node, want)
	}
	if len(req.DNSNames) != 1 || req.DNSNames[0] != want {
		return "", fmt.Errorf("DNS names %v: exactly [%s] may be asked for", req.DNSNames, want)
	}
	if len(req.IPAddresses) > 0 || len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return "", fmt.Errorf("IP addresses, e-mail addresses and URIs may not be asked for")
	}
	if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageServerAuth) {
		return "", fmt.Errorf("usages %v: server auth is required", csr.Spec.Usages)
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(allowedUsages, u) {
			return "", fmt.Errorf("usage %q may not be asked for (allowed: %v)", u, allowedUsages)
		}
	}
	return node, nil
}

// ParseRequest decodes and checks the signature of a PEM certificate request.
func ParseRequest(b []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("spec.request is not a PEM certificate request")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request signature: %w", err)
	}
	return req, nil
}
