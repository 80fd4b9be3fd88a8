package launcherpod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// EphemeralStorageOverhead is the launcher's own use of the pod's writable space beyond its
// blank disks: containerDisk overlays' metadata, QEMU's and the launcher's logs (KubeVirt's 50M).
var EphemeralStorageOverhead = resource.MustParse("50M")

// ephemeralStorage adds the VM's disks to the pod's ephemeral-storage: every emptyDisk at its
// capacity and the overhead, on top of what the VMI asks for. A limit is set when the VMI sets
// one: then a guest that fills its overlays or blank disks past it gets its pod evicted, and the
// node keeps its disk.
func ephemeralStorage(vmi *virtv1.VirtualMachineInstance, res *corev1.ResourceRequirements) {
	disks := EphemeralStorageOverhead.DeepCopy()
	for _, v := range vmi.Spec.Volumes {
		if v.EmptyDisk != nil {
			disks.Add(v.EmptyDisk.Capacity)
		}
	}
	vmiRes := vmi.Spec.Domain.Resources
	req := disks.DeepCopy()
	if q, ok := vmiRes.Requests[corev1.ResourceEphemeralStorage]; ok {
		req.Add(q)
	}
	res.Requests[corev1.ResourceEphemeralStorage] = req
	if q, ok := vmiRes.Limits[corev1.ResourceEphemeralStorage]; ok {
		limit := disks.DeepCopy()
		limit.Add(q)
		if res.Limits == nil {
			res.Limits = corev1.ResourceList{}
		}
		res.Limits[corev1.ResourceEphemeralStorage] = limit
	}
}
