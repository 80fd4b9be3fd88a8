package launcherpod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// The node agent's device plugins' resources (KubeVirt's names).
const (
	KVMDevice        corev1.ResourceName = "devices.kubevirt.io/kvm"
	TunDevice        corev1.ResourceName = "devices.kubevirt.io/tun"
	VhostNetDevice   corev1.ResourceName = "devices.kubevirt.io/vhost-net"
	VhostVsockDevice corev1.ResourceName = "devices.kubevirt.io/vhost-vsock"
)

// deviceResources are the host devices the VMI's launcher needs, as KubeVirt requests them: the
// hypervisor unless guests are emulated, the tap device for any interface, vhost-net for a virtio
// interface unless emulated (QEMU then uses its userland NIC), vhost-vsock for a VSOCK device.
func deviceResources(vmi *virtv1.VirtualMachineInstance, useEmulation bool) corev1.ResourceList {
	devs := vmi.Spec.Domain.Devices
	one := resource.MustParse("1")
	out := corev1.ResourceList{}
	if !useEmulation {
		out[KVMDevice] = one.DeepCopy()
	}
	if len(devs.Interfaces) > 0 || devs.AutoattachPodInterface == nil || *devs.AutoattachPodInterface {
		out[TunDevice] = one.DeepCopy()
	}
	if !useEmulation && hasVirtioInterface(devs.Interfaces) {
		out[VhostNetDevice] = one.DeepCopy()
	}
	if devs.WantsVSOCK() {
		out[VhostVsockDevice] = one.DeepCopy()
	}
	return out
}

func hasVirtioInterface(ifaces []virtv1.Interface) bool {
	for _, i := range ifaces {
		if i.Model == "" || i.Model == "virtio" {
			return true
		}
	}
	return false
}
