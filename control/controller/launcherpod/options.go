package launcherpod

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults of Options.
const (
	DefaultImage = "qvirt/virt-launcher:latest"
)

// Memory overheads of a launcher pod on top of the guest memory. They come from
// qvirt's own measurements of an idle launcher (Go runtime, gRPC server) and of
// QEMU with the default device set (code, TCG or KVM state, device buffers),
// plus a share of guest memory for page tables and I/O buffers that grows with
// the guest. There is no libvirtd in the pod, which is why they are far below
// KubeVirt's.
var (
	DefaultLauncherOverhead = resource.MustParse("20Mi")
	DefaultQEMUOverhead     = resource.MustParse("70Mi")
)

// DefaultGuestOverheadPercent is the share of guest memory added to the overhead.
const DefaultGuestOverheadPercent = 2

// Options are the cluster-wide knobs of launcher pods.
type Options struct {
	// Image of the compute container.
	Image string
	// LauncherOverhead is the memory of the virt-launcher process itself.
	LauncherOverhead resource.Quantity
	// QEMUOverhead is QEMU's memory beyond guest RAM.
	QEMUOverhead resource.Quantity
	// GuestOverheadPercent of guest memory is added to the overhead.
	GuestOverheadPercent int64
	// UseEmulation is the KubeVirt CR's developerConfiguration.useEmulation: guests run under
	// TCG, so the pod requests no /dev/kvm (nor vhost-net).
	UseEmulation bool
	// Claims are the claims of the VMI's persistentVolumeClaim volumes, by claim name, as they
	// were when the pod is made (their volume mode decides a mount or a device).
	Claims map[string]*corev1.PersistentVolumeClaim
}

// DefaultOptions returns Options with every field at its default.
func DefaultOptions() Options {
	return Options{
		Image:                DefaultImage,
		LauncherOverhead:     DefaultLauncherOverhead.DeepCopy(),
		QEMUOverhead:         DefaultQEMUOverhead.DeepCopy(),
		GuestOverheadPercent: DefaultGuestOverheadPercent,
	}
}

// withDefaults fills unset string fields; zero overheads are kept, a caller
// may really want none.
func (o Options) withDefaults() Options {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	return o
}

// Validate reports options no pod can be rendered with.
func (o Options) Validate() error {
	if o.LauncherOverhead.Sign() < 0 || o.QEMUOverhead.Sign() < 0 {
		return fmt.Errorf("memory overheads must not be negative")
	}
	if o.GuestOverheadPercent < 0 || o.GuestOverheadPercent > 100 {
		return fmt.Errorf("guest overhead percent %d is outside 0..100", o.GuestOverheadPercent)
	}
	return nil
}
