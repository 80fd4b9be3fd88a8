// Package deploy holds qvirt's manifests. virt-operator installs the component manifests
// embedded here; operator.yaml installs virt-operator itself.
package deploy

import "embed"

// ComponentFiles are the manifests virt-operator applies from a KubeVirt CR, in this order.
var ComponentFiles = []string{
	"rbac.yaml", "node-restriction.yaml", "virt-operator-webhook.yaml", "virt-api.yaml", "webhooks.yaml", "apiservice.yaml",
	"virt-controller.yaml", "virt-handler.yaml",
}

// Components holds ComponentFiles.
//
//go:embed rbac.yaml node-restriction.yaml virt-operator-webhook.yaml virt-api.yaml webhooks.yaml apiservice.yaml virt-controller.yaml virt-handler.yaml
var Components embed.FS
