/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/qvirt/qvirt/api/v1"
)

const (
	// DefaultMachineType is KubeVirt's default on amd64.
	DefaultMachineType = "q35"
	// DefaultArchitecture is the only architecture qvirt runs.
	DefaultArchitecture = "amd64"
	// DefaultNetworkName names the pod network added when a VMI has none.
	DefaultNetworkName = "default"
)

// firmwareUUIDNamespace is the namespace of KubeVirt's name-based firmware UUIDs
// (virt-controller's CalculateLegacyUUID), unchanged since KubeVirt v1.0: a VMI
// gets the UUID KubeVirt would give a VM of the same name.
var firmwareUUIDNamespace = uuid.MustParse("6a1a24a1-4061-4607-8bf4-a3963d0c5895")

// FirmwareUUID is the SMBIOS UUID KubeVirt derives from a VM's name when none is
// set: a version 5 UUID of the name alone.
func FirmwareUUID(name string) types.UID {
	return types.UID(uuid.NewSHA1(firmwareUUIDNamespace, []byte(name)).String())
}

// SetVMIDefaults applies the defaults KubeVirt's mutating webhook applies when a
// VMI is created: the spec defaults, a firmware UUID from the name, the
// foreground-delete finalizer and phase Pending.
func SetVMIDefaults(vmi *v1.VirtualMachineInstance, cfg Config) {
	SetVMISpecDefaults(&vmi.Spec, cfg)
	setFirmwareUUID(&vmi.Spec, vmi.Name)
	addFinalizer(&vmi.ObjectMeta.Finalizers, v1.VirtualMachineInstanceFinalizer)
	if vmi.Status.Phase == v1.VmPhaseUnset {
		vmi.Status.Phase = v1.Pending
	}
}

// SetVMDefaults applies what KubeVirt sets on a VM: the template's architecture and
// machine type at admission, and the name-based firmware UUID its VM controller
// persists. Run strategy and everything else stay as written.
func SetVMDefaults(vm *v1.VirtualMachine, _ Config) {
	t := vm.Spec.Template
	if t == nil {
		return // the validator refuses a VM without a template
	}
	if t.Spec.Architecture == "" {
		t.Spec.Architecture = DefaultArchitecture
	}
	setMachineType(&t.Spec)
	setFirmwareUUID(&t.Spec, vm.Name)
}

// SetMigrationDefaults labels a migration with its VMI's name, which `virtctl
// migrate-cancel` selects on, and adds the cleanup finalizer.
func SetMigrationDefaults(m *v1.VirtualMachineInstanceMigration) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[v1.MigrationSelectorLabel] = m.Spec.VMIName
	addFinalizer(&m.Finalizers, v1.VirtualMachineInstanceMigrationFinalizer)
}

// SetVMISpecDefaults applies KubeVirt's spec defaults, in KubeVirt's order:
// resources before guest memory, CPU topology, the default pod interface, a disk
// for every volume, then the device defaults of those disks.
func SetVMISpecDefaults(spec *v1.VirtualMachineInstanceSpec, _ Config) {
	if spec.Architecture == "" {
		spec.Architecture = DefaultArchitecture
	}
	setMachineType(spec)
	setResourceRequests(spec)
	setGuestMemory(spec)
	setCPUTopology(spec)
	setPullPolicies(spec)
	setDefaultPodInterface(spec)
	setVolumeDisks(spec)
	setDiskDevices(spec)
	if spec.Domain.Features == nil {
		spec.Domain.Features = &v1.Features{}
	}
	if spec.Domain.Features.ACPI.Enabled == nil {
		spec.Domain.Features.ACPI.Enabled = ptr(true)
	}
	if spec.Domain.Firmware == nil {
		spec.Domain.Firmware = &v1.Firmware{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr(v1.DefaultGracePeriodSeconds)
	}
}

func setMachineType(spec *v1.VirtualMachineInstanceSpec) {
	if spec.Domain.Machine == nil {
		spec.Domain.Machine = &v1.Machine{}
	}
	if spec.Domain.Machine.Type == "" {
		spec.Domain.Machine.Type = DefaultMachineType
	}
}

func setFirmwareUUID(spec *v1.VirtualMachineInstanceSpec, name string) {
	if spec.Domain.Firmware == nil {
		spec.Domain.Firmware = &v1.Firmware{}
	}
	if spec.Domain.Firmware.UUID == "" && name != "" {
		spec.Domain.Firmware.UUID = FirmwareUUID(name)
	}
}

// setResourceRequests copies limits into missing requests and sizes the memory
// request from the guest memory (KubeVirt with memory overcommit 100%).
func setResourceRequests(spec *v1.VirtualMachineInstanceSpec) {
	res := &spec.Domain.Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		limit, hasLimit := res.Limits[name]
		if !hasLimit || limit.IsZero() {
			continue
		}
		if req, ok := res.Requests[name]; !ok || req.IsZero() {
			if res.Requests == nil {
				res.Requests = corev1.ResourceList{}
			}
			res.Requests[name] = limit.DeepCopy()
		}
	}
	if _, ok := res.Requests[corev1.ResourceMemory]; ok {
		return
	}
	if m := spec.Domain.Memory; m != nil && m.Guest != nil && m.Guest.Sign() > 0 {
		if res.Requests == nil {
			res.Requests = corev1.ResourceList{}
		}
		res.Requests[corev1.ResourceMemory] = m.Guest.DeepCopy()
	}
}

// setGuestMemory sizes the guest from the memory request, else the limit.
func setGuestMemory(spec *v1.VirtualMachineInstanceSpec) {
	if spec.Domain.Memory != nil && spec.Domain.Memory.Guest != nil {
		return
	}
	res := spec.Domain.Resources
	var guest corev1.ResourceList
	switch {
	case !res.Requests.Memory().IsZero():
		guest = res.Requests
	case !res.Limits.Memory().IsZero():
		guest = res.Limits
	default:
		return
	}
	if spec.Domain.Memory == nil {
		spec.Domain.Memory = &v1.Memory{}
	}
	q := guest[corev1.ResourceMemory].DeepCopy()
	spec.Domain.Memory.Guest = &q
}

// setCPUTopology follows KubeVirt: with no topology at all the vCPUs become
// sockets, as many as the CPU limit (else request) rounded up; counts left unset
// next to a set one are 1, which KubeVirt applies when it builds the domain and
// qvirt writes down at admission.
func setCPUTopology(spec *v1.VirtualMachineInstanceSpec) {
	if spec.Domain.CPU == nil {
		spec.Domain.CPU = &v1.CPU{}
	}
	cpu := spec.Domain.CPU
	if cpu.Sockets == 0 && cpu.Cores == 0 && cpu.Threads == 0 {
		cpu.Sockets = 1
		res := spec.Domain.Resources
		if q, ok := res.Limits[corev1.ResourceCPU]; ok {
			cpu.Sockets = clampCount(q.Value())
		} else if q, ok := res.Requests[corev1.ResourceCPU]; ok {
			cpu.Sockets = clampCount(q.Value())
		}
	}
	for _, n := range []*uint32{&cpu.Sockets, &cpu.Cores, &cpu.Threads} {
		if *n == 0 {
			*n = 1
		}
	}
}

// clampCount keeps an absurd CPU quantity representable; validation then refuses
// it by the vCPU maximum.
func clampCount(v int64) uint32 {
	switch {
	case v < 1:
		return 1
	case v > 1<<20:
		return 1 << 20
	}
	return uint32(v)
}

// setPullPolicies mirrors the kubelet default KubeVirt writes down: Always for
// :latest or untagged images, IfNotPresent otherwise.
func setPullPolicies(spec *v1.VirtualMachineInstanceSpec) {
	for i := range spec.Volumes {
		cd := spec.Volumes[i].ContainerDisk
		if cd == nil || cd.ImagePullPolicy != "" {
			continue
		}
		if strings.HasSuffix(cd.Image, ":latest") || !strings.ContainsAny(cd.Image, ":@") {
			cd.ImagePullPolicy = corev1.PullAlways
		} else {
			cd.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
}

// setDefaultPodInterface attaches the pod network with a bridge binding when the
// VMI names neither interfaces nor networks (KubeVirt's default binding unless
// the cluster configures masquerade).
func setDefaultPodInterface(spec *v1.VirtualMachineInstanceSpec) {
	d := &spec.Domain.Devices
	if a := d.AutoattachPodInterface; a != nil && !*a {
		return
	}
	if len(d.Interfaces) > 0 || len(spec.Networks) > 0 {
		return
	}
	d.Interfaces = []v1.Interface{{
		Name:                   DefaultNetworkName,
		InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}},
	}}
	spec.Networks = []v1.Network{{Name: DefaultNetworkName, NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
}

// setVolumeDisks adds a disk for every volume no disk names, but for memoryDump volumes: QEMU
// writes a dump into them, the guest never sees them.
func setVolumeDisks(spec *v1.VirtualMachineInstanceSpec) {
	named := map[string]bool{}
	for _, d := range spec.Domain.Devices.Disks {
		named[d.Name] = true
	}
	for _, vol := range spec.Volumes {
		if !named[vol.Name] && vol.MemoryDump == nil {
			spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, v1.Disk{Name: vol.Name})
			named[vol.Name] = true
		}
	}
}

// setDiskDevices makes a target-less disk a disk, puts every device without a
// bus on sata (KubeVirt's amd64 default), but the disk of a hotplugged volume on
// scsi (virtctl addvolume's default: sata cannot be hotplugged), and closes cdroms
// read-only.
func setDiskDevices(spec *v1.VirtualMachineInstanceSpec) {
	hotplugged := map[string]bool{}
	for i := range spec.Volumes {
		hotplugged[spec.Volumes[i].Name] = spec.Volumes[i].IsHotplugged()
	}
	for i := range spec.Domain.Devices.Disks {
		dev := &spec.Domain.Devices.Disks[i].DiskDevice
		if dev.Disk == nil && dev.CDRom == nil && dev.LUN == nil {
			dev.Disk = &v1.DiskTarget{}
		}
		if dev.Disk != nil && dev.Disk.Bus == "" {
			dev.Disk.Bus = v1.DiskBusSATA
			if hotplugged[spec.Domain.Devices.Disks[i].Name] {
				dev.Disk.Bus = v1.DiskBusSCSI
			}
		}
		if dev.LUN != nil && dev.LUN.Bus == "" {
			dev.LUN.Bus = v1.DiskBusSATA
		}
		if c := dev.CDRom; c != nil {
			if c.Bus == "" {
				c.Bus = v1.DiskBusSATA
			}
			if c.ReadOnly == nil {
				c.ReadOnly = ptr(true)
			}
			if c.Tray == "" {
				c.Tray = v1.TrayStateClosed
			}
		}
	}
}

func addFinalizer(list *[]string, f string) {
	for _, x := range *list {
		if x == f {
			return
		}
	}
	*list = append(*list, f)
}

func ptr[T any](v T) *T { return &v }
