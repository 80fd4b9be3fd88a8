package vmiutil

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

// PodOptions are base with the KubeVirt CR's settings in force now, read from r (the
// controller's cache): a launcher pod is rendered with the configuration of the moment it is made.
func PodOptions(ctx context.Context, r client.Reader, base launcherpod.Options) (launcherpod.Options, error) {
	cfg, err := config.Read(ctx, r, config.VirtController)
	if err != nil {
		return base, err
	}
	base.UseEmulation = cfg.UseEmulation
	return base, nil
}
