/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	// memoryDumpOverhead is what a dump needs beyond the guest's memory (KubeVirt's figure).
	memoryDumpOverhead = 100 << 20
	// dumpFSOverhead is the share of a Filesystem claim its filesystem takes: KubeVirt's default
	// when CDI, which would say otherwise, is absent.
	dumpFSOverhead = 0.055
)

// MemoryDumpClaimSize is the smallest claim a memory dump of the VMI fits in, by KubeVirt's
// rule: the guest memory plus 100 MiB, plus 5.5 % for the filesystem, rounded up to whole MiB.
// virt-api refuses smaller claims and virtctl creates claims of this size. The guest memory is
// memory.guest, else the memory request, else the limit (KubeVirt reads the request, which is
// smaller than what is dumped when memory is overcommitted).
func MemoryDumpClaimSize(vmi *VirtualMachineInstance) (resource.Quantity, error) {
	d := vmi.Spec.Domain
	var guest resource.Quantity
	switch {
	case d.Memory != nil && d.Memory.Guest != nil && d.Memory.Guest.Sign() > 0:
		guest = *d.Memory.Guest
	case d.Resources.Requests.Memory().Sign() > 0:
		guest = *d.Resources.Requests.Memory()
	case d.Resources.Limits.Memory().Sign() > 0:
		guest = *d.Resources.Limits.Memory()
	default:
		return resource.Quantity{}, fmt.Errorf("VMI %s/%s has no guest memory size", vmi.Namespace, vmi.Name)
	}
	const mi = 1 << 20
	total := (1 + dumpFSOverhead) * float64(guest.Value()+memoryDumpOverhead)
	total = math.Max(math.Ceil(total/mi), 1) * mi
	return *resource.NewQuantity(int64(total), guest.Format), nil
}
