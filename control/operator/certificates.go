package operator

import (
	"context"
	"time"

	"github.com/qvirt/qvirt/control/operator/certs"
	"github.com/qvirt/qvirt/control/operator/install"
	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/node/nodeapi"
)

// Where the installation's certificates live. kubevirt-ca signs virt-api's serving and client
// certificates; kubevirt-node-ca, whose key virt-controller holds, signs each node agent's
// serving certificate through a CertificateSigningRequest (so it signs certificates this
// operator never sees, no longer than the CA lives: its old CAs stay until they expire).
const (
	APIServingSecret = "kubevirt-virt-api-certs"
	APIClientSecret  = "kubevirt-virt-api-node-client"
	NodeCASecret     = "kubevirt-node-ca"
	NodeCABundle     = "kubevirt-node-ca"
	OperatorSecret   = "kubevirt-operator-certs"
	// The webhook configurations and the APIService whose caBundle is kubevirt-ca's bundle.
	mutatingWebhooks   = "virt-api-mutator"
	validatingWebhooks = "virt-api-validator"
	operatorWebhooks   = "virt-operator-validator"
	apiService         = "v1.subresources.kubevirt.io"
)

func managedLabels() map[string]string {
	return map[string]string{install.ManagedByLabel: install.ManagedByValue}
}

func (r *Reconciler) rotators(cfg certs.Config) (main, node *certs.Rotator) {
	ns := r.Namespace
	main = &certs.Rotator{Kube: r.Kube, Aggregator: r.Aggregator, Namespace: ns, Config: cfg, Propagation: r.Propagation, Labels: managedLabels(),
		Leaves: []certs.LeafSpec{
			{Secret: APIServingSecret, Request: pki.Request{CommonName: "virt-api", Server: true,
				DNSNames: []string{"virt-api." + ns + ".svc", "virt-api." + ns + ".svc.cluster.local"}}},
			{Secret: APIClientSecret, Request: pki.Request{CommonName: nodeapi.DefaultClientIdentity, Client: true}},
			{Secret: OperatorSecret, Request: pki.Request{CommonName: "virt-operator", Server: true,
				DNSNames: []string{OperatorService + "." + ns + ".svc", OperatorService + "." + ns + ".svc.cluster.local"}}},
		},
		MutatingWebhooks:   []string{mutatingWebhooks},
		ValidatingWebhooks: []string{validatingWebhooks, operatorWebhooks},
		APIServices:        []string{apiService},
	}
	node = &certs.Rotator{Kube: r.Kube, Namespace: ns, Config: cfg, Propagation: r.Propagation, Labels: managedLabels(),
		CASecret: NodeCASecret, BundleConfigMap: NodeCABundle, Unseen: true}
	return main, node
}

// syncCertificates carries out what both CAs' rotations need now and returns the main bundle
// and when to look again.
func (r *Reconciler) syncCertificates(ctx context.Context, cfg certs.Config) ([]byte, time.Time, error) {
	main, node := r.rotators(cfg)
	next, err := main.Sync(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	nodeNext, err := node.Sync(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	if !nodeNext.IsZero() && nodeNext.Before(next) {
		next = nodeNext
	}
	bundle, err := main.Bundle(ctx)
	return bundle, next, err
}
