package handler

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// liveMigratable is the VMI's LiveMigratable condition, from KubeVirt's checks in KubeVirt's
// order (disks, then interfaces), with KubeVirt's reasons and messages. Disks that live with
// the VM (containerDisk, emptyDisk, cloud-init) move with it.
func liveMigratable(vmi *v1.VirtualMachineInstance) (ok bool, reason, msg string) {
	for _, vol := range vmi.Spec.Volumes {
		switch {
		case vol.IsHotplugged():
			// The migration target's QEMU would need the attachment pods on its node first.
			return false, v1.VirtualMachineInstanceReasonDisksNotMigratable,
				fmt.Sprintf("cannot migrate VMI with hotplugged volume %s: unplug it first", vol.Name)
		case vol.HostDisk != nil && (vol.HostDisk.Shared == nil || !*vol.HostDisk.Shared):
			return false, v1.VirtualMachineInstanceReasonDisksNotMigratable, "cannot migrate VMI with non-shared HostDisk"
		case vol.PersistentVolumeClaim != nil && !sharedClaim(vmi, vol.PersistentVolumeClaim.ClaimName):
			return false, v1.VirtualMachineInstanceReasonDisksNotMigratable,
				fmt.Sprintf("cannot migrate VMI: PVC %v is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", vol.PersistentVolumeClaim.ClaimName)
		}
	}
	for _, in := range podInterfaces(vmi) {
		if in.Masquerade == nil {
			return false, v1.VirtualMachineInstanceReasonInterfaceNotMigratable,
				"cannot migrate VMI which does not use masquerade, bridge with kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a migratable plugin to connect to the pod network"
		}
	}
	return true, "", ""
}

// sharedClaim reports a claim that both nodes of a migration can use at once: ReadWriteMany, as
// virt-controller recorded it on the VMI.
func sharedClaim(vmi *v1.VirtualMachineInstance, claim string) bool {
	for _, vs := range vmi.Status.VolumeStatus {
		if info := vs.PersistentVolumeClaimInfo; info != nil && info.ClaimName == claim {
			return slices.Contains(info.AccessModes, corev1.ReadWriteMany)
		}
	}
	return false
}
