package localmode

import (
	"net"
	"path/filepath"
	"time"

	"github.com/qvirt/qvirt/internal/pki"
)

// identities are the files each component authenticates with.
type identities struct {
	kubeconfig map[string]string // component -> kubeconfig
	pki        string
	// virt-api
	apiCert, apiKey, nodeClientCert, nodeClientKey string
	// per node: the node API's serving certificate
	handlerCert, handlerKey map[string]string
	caFile                  string
}

const handlerServerName = "virt-handler.kubevirt.svc"

// identities issues the components' credentials: client certificates named after KubeVirt's
// service accounts (so deploy/rbac.yaml applies to them as on a real cluster), node identities
// for the pod runners, and a qvirt CA for virt-api's and the node agents' serving certificates.
func (c *Cluster) identities() (*identities, error) {
	ids := &identities{kubeconfig: map[string]string{}, pki: filepath.Join(c.opts.Dir, "pki"),
		handlerCert: map[string]string{}, handlerKey: map[string]string{}}
	sa := func(name string) (string, error) {
		_, kc, err := c.K8s.UserConfig("system:serviceaccount:"+Namespace+":"+name, "system:serviceaccounts", "system:serviceaccounts:"+Namespace, "system:authenticated")
		return kc, err
	}
	var err error
	for comp, account := range map[string]string{"virt-api": "kubevirt-apiserver", "virt-controller": "kubevirt-controller", "virt-handler": "kubevirt-handler"} {
		if ids.kubeconfig[comp], err = sa(account); err != nil {
			return nil, err
		}
	}
	for _, n := range c.opts.Nodes {
		if _, ids.kubeconfig["node/"+n], err = c.K8s.UserConfig("system:node:"+n, "system:nodes", "system:authenticated"); err != nil {
			return nil, err
		}
	}
	if c.CA, err = pki.NewCA("qvirt-ca", 7*24*time.Hour); err != nil {
		return nil, err
	}
	ids.caFile = filepath.Join(ids.pki, "ca.crt")
	if err := pki.WriteFileAtomic(ids.caFile, c.CA.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	issue := func(file string, r pki.Request) (string, string, error) {
		kp, err := c.CA.Sign(r)
		if err != nil {
			return "", "", err
		}
		return kp.Write(ids.pki, file)
	}
	loop := []net.IP{net.ParseIP("127.0.0.1")}
	if ids.apiCert, ids.apiKey, err = issue("virt-api", pki.Request{CommonName: "virt-api", Server: true, IPs: loop,
		DNSNames: []string{"virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local", "localhost"}}); err != nil {
		return nil, err
	}
	if ids.nodeClientCert, ids.nodeClientKey, err = issue("virt-api-node-client", pki.Request{CommonName: "virt-api", Client: true}); err != nil {
		return nil, err
	}
	for _, n := range c.opts.Nodes {
		if ids.handlerCert[n], ids.handlerKey[n], err = issue("virt-handler-"+n, pki.Request{CommonName: "virt-handler:" + n, Server: true,
			IPs: loop, DNSNames: []string{handlerServerName}}); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
