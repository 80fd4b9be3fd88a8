package operator

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/operator/certs"
	"github.com/qvirt/qvirt/control/operator/install"
)

// Settings are what the operator makes of a KubeVirt CR.
type Settings struct {
	Certs certs.Config
	// Install is what to render, but for the CA bundle.
	Install install.Options
	// BlockUninstall: deleting the CR is refused while workloads exist.
	BlockUninstall bool
}

// SettingsOf reads kv as the operator does; namespace, registry and tag are the operator's
// own (its image's registry and tag are the components' defaults).
func SettingsOf(kv *v1.KubeVirt, namespace, registry, tag string) (Settings, field.ErrorList) {
	cfg, errs := certs.ConfigFrom(kv.Spec.CertificateRotationStrategy)
	if kv.Spec.ImageRegistry != "" {
		registry = kv.Spec.ImageRegistry
	}
	if kv.Spec.ImageTag != "" {
		tag = kv.Spec.ImageTag
	}
	var secrets []string
	for _, s := range kv.Spec.ImagePullSecrets {
		secrets = append(secrets, s.Name)
	}
	return Settings{
		Certs: cfg,
		Install: install.Options{Namespace: namespace, Registry: registry, Tag: tag,
			PullPolicy: string(kv.Spec.ImagePullPolicy), PullSecrets: secrets, NodeCertLifetime: cfg.ServerDuration},
		BlockUninstall: kv.Spec.UninstallStrategy != v1.KubeVirtUninstallStrategyRemoveWorkloads,
	}, errs
}
