/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// defaultVMIPv6NetworkCIDR is KubeVirt's masquerade IPv6 subnet: a manifest may name it, which
// means what leaving it out means.
const defaultVMIPv6NetworkCIDR = "fd10:0:2::/120"

// The API types model more of KubeVirt than qvirt runs. Everything below is
// refused where it appears, so that a manifest never starts a VM that silently
// lacks what it asked for.

func unsupportedInVMISpec(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	if a := spec.Architecture; a != "" && a != DefaultArchitecture {
		errs = append(errs, unsupported(path.Child("architecture"), fmt.Sprintf("architecture %q, only %s", a, DefaultArchitecture)))
	}
	if spec.ReadinessProbe != nil {
		errs = append(errs, unsupported(path.Child("readinessProbe"), "readiness probes"))
	}
	if spec.LivenessProbe != nil {
		errs = append(errs, unsupported(path.Child("livenessProbe"), "liveness probes"))
	}
	domain := path.Child("domain")
	errs = append(errs, unsupportedInDomain(domain, &spec.Domain)...)
	errs = append(errs, unsupportedInDevices(domain.Child("devices"), &spec.Domain.Devices)...)
	for i, n := range spec.Networks {
		if n.Multus != nil {
			errs = append(errs, unsupported(path.Child("networks").Index(i).Child("multus"), "multus networks"))
		}
		if n.Pod != nil && n.Pod.VMIPv6NetworkCIDR != "" && n.Pod.VMIPv6NetworkCIDR != defaultVMIPv6NetworkCIDR {
			errs = append(errs, unsupported(path.Child("networks").Index(i).Child("pod", "vmIPv6NetworkCIDR"),
				"an IPv6 guest subnet: the masquerade binding gives the guest no IPv6"))
		}
	}
	for i, vol := range spec.Volumes {
		errs = append(errs, unsupportedVolumeSource(path.Child("volumes").Index(i), vol.VolumeSource)...)
	}
	return errs
}

func unsupportedInDomain(p *field.Path, d *v1.DomainSpec) field.ErrorList {
	var errs field.ErrorList
	for _, name := range slices.Sorted(maps.Keys(d.Resources.Requests)) {
		errs = append(errs, unsupportedResource(p.Child("resources", "requests", string(name)), name)...)
	}
	for _, name := range slices.Sorted(maps.Keys(d.Resources.Limits)) {
		errs = append(errs, unsupportedResource(p.Child("resources", "limits", string(name)), name)...)
	}
	if c := d.CPU; c != nil {
		cp := p.Child("cpu")
		if len(c.Features) > 0 {
			errs = append(errs, unsupported(cp.Child("features"), "CPU feature flags"))
		}
		if c.DedicatedCPUPlacement {
			errs = append(errs, unsupported(cp.Child("dedicatedCpuPlacement"), "dedicated CPU placement"))
		}
		if c.IsolateEmulatorThread {
			errs = append(errs, unsupported(cp.Child("isolateEmulatorThread"), "emulator thread isolation"))
		}
		if c.MaxSockets != 0 {
			errs = append(errs, unsupported(cp.Child("maxSockets"), "CPU hotplug"))
		}
	}
	if m := d.Memory; m != nil {
		if m.Hugepages != nil {
			errs = append(errs, unsupported(p.Child("memory", "hugepages"), "hugepages"))
		}
		if m.MaxGuest != nil {
			errs = append(errs, unsupported(p.Child("memory", "maxGuest"), "memory hotplug"))
		}
	}
	if fw := d.Firmware; fw != nil && fw.Bootloader != nil {
		bp := p.Child("firmware", "bootloader")
		if fw.Bootloader.EFI != nil {
			errs = append(errs, unsupported(bp.Child("efi"), "EFI firmware (and so SecureBoot)"))
		}
		if b := fw.Bootloader.BIOS; b != nil && b.UseSerial != nil && *b.UseSerial {
			errs = append(errs, unsupported(bp.Child("bios", "useSerial"), "BIOS output on the serial console"))
		}
	}
	if c := d.Clock; c != nil {
		cp := p.Child("clock")
		if c.Timezone != nil {
			errs = append(errs, unsupported(cp.Child("timezone"), "a guest clock in a timezone"))
		}
		if c.UTC != nil && c.UTC.OffsetSeconds != nil && *c.UTC.OffsetSeconds != 0 {
			errs = append(errs, unsupported(cp.Child("utc", "offsetSeconds"), "a guest clock offset"))
		}
		if c.Timer != nil {
			errs = append(errs, unsupported(cp.Child("timer"), "guest timer settings"))
		}
	}
	if f := d.Features; f != nil {
		fp := p.Child("features")
		if a := f.APIC; a != nil && ((a.Enabled != nil && !*a.Enabled) || a.EndOfInterrupt) {
			errs = append(errs, unsupported(fp.Child("apic"), "APIC settings: the APIC is always on"))
		}
		if f.Hyperv != nil {
			errs = append(errs, unsupported(fp.Child("hyperv"), "Hyper-V enlightenments"))
		}
		if f.SMM != nil {
			errs = append(errs, unsupported(fp.Child("smm"), "SMM settings"))
		}
		if f.KVM != nil {
			errs = append(errs, unsupported(fp.Child("kvm"), "hiding KVM from the guest"))
		}
		if f.Pvspinlock != nil {
			errs = append(errs, unsupported(fp.Child("pvspinlock"), "pvspinlock settings"))
		}
	}
	return errs
}

func unsupportedResource(p *field.Path, name corev1.ResourceName) field.ErrorList {
	if name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourceEphemeralStorage {
		return nil
	}
	return field.ErrorList{unsupported(p, fmt.Sprintf("the resource %q: only cpu, memory and ephemeral-storage", name))}
}

func unsupportedInDevices(p *field.Path, d *v1.Devices) field.ErrorList {
	var errs field.ErrorList
	on := func(b *bool) bool { return b != nil && *b }
	for _, f := range []struct {
		set        bool
		name, what string
	}{
		{on(d.UseVirtioTransitional), "useVirtioTransitional", "transitional virtio devices"},
		{d.Watchdog != nil, "watchdog", "watchdog devices"},
		{len(d.Inputs) > 0, "inputs", "input devices"},
		{on(d.AutoattachInputDevice), "autoattachInputDevice", "input devices"},
		{on(d.LogSerialConsole), "logSerialConsole", "logging the serial console to the pod log"},
		{on(d.BlockMultiQueue), "blockMultiQueue", "multi-queue block devices"},
		{on(d.NetworkInterfaceMultiQueue), "networkInterfaceMultiqueue", "multi-queue network interfaces"},
		{d.TPM != nil, "tpm", "TPM devices"},
	} {
		if f.set {
			errs = append(errs, unsupported(p.Child(f.name), f.what))
		}
	}
	for i, disk := range d.Disks {
		errs = append(errs, unsupportedInDisk(p.Child("disks").Index(i), disk)...)
	}
	for i, in := range d.Interfaces {
		errs = append(errs, unsupportedInInterface(p.Child("interfaces").Index(i), in)...)
	}
	return errs
}

func unsupportedInDisk(dp *field.Path, d v1.Disk) field.ErrorList {
	var errs field.ErrorList
	if d.LUN != nil {
		errs = append(errs, unsupported(dp.Child("lun"), "lun disks"))
	}
	if d.Disk != nil && d.Disk.PciAddress != "" {
		errs = append(errs, unsupported(dp.Child("disk", "pciAddress"), "PCI addresses for disks"))
	}
	if c := d.CDRom; c != nil {
		if c.ReadOnly != nil && !*c.ReadOnly {
			errs = append(errs, unsupported(dp.Child("cdrom", "readonly"), "writable cdroms"))
		}
		if c.Tray == v1.TrayStateOpen {
			errs = append(errs, unsupported(dp.Child("cdrom", "tray"), "cdroms with an open tray"))
		}
	}
	for _, f := range []struct {
		set        bool
		name, what string
	}{
		{d.DedicatedIOThread != nil && *d.DedicatedIOThread, "dedicatedIOThread", "dedicated I/O threads"},
		{d.Cache != "", "cache", "disk cache modes"},
		{d.IO != "", "io", "disk I/O modes"},
		{d.ErrorPolicy != nil, "errorPolicy", "disk error policies"},
		{d.Tag != "", "tag", "device tags"},
		{d.Shareable != nil && *d.Shareable, "shareable", "shareable disks"},
	} {
		if f.set {
			errs = append(errs, unsupported(dp.Child(f.name), f.what))
		}
	}
	return errs
}

func unsupportedInInterface(ip *field.Path, in v1.Interface) field.ErrorList {
	var errs field.ErrorList
	if in.Model != "" && in.Model != "virtio" {
		errs = append(errs, unsupported(ip.Child("model"), fmt.Sprintf("interface model %s, only virtio", in.Model)))
	}
	if in.PciAddress != "" {
		errs = append(errs, unsupported(ip.Child("pciAddress"), "PCI addresses for interfaces"))
	}
	if in.Tag != "" {
		errs = append(errs, unsupported(ip.Child("tag"), "device tags"))
	}
	if in.ACPIIndex != 0 {
		errs = append(errs, unsupported(ip.Child("acpiIndex"), "ACPI indexes for interfaces"))
	}
	if in.State != "" && in.State != v1.InterfaceStateLinkUp {
		errs = append(errs, unsupported(ip.Child("state"), fmt.Sprintf("interface state %q", in.State)))
	}
	return errs
}

func unsupportedVolumeSource(vp *field.Path, s v1.VolumeSource) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		set        bool
		name, what string
	}{
		{s.CloudInitConfigDrive != nil, "cloudInitConfigDrive", "cloudInitConfigDrive volumes"},
		{s.DataVolume != nil, "dataVolume", "dataVolume volumes"},
		{s.ConfigMap != nil, "configMap", "configMap volumes"},
		{s.Secret != nil, "secret", "secret volumes"},
		{s.ServiceAccount != nil, "serviceAccount", "serviceAccount volumes"},
	} {
		if f.set {
			errs = append(errs, unsupported(vp.Child(f.name), f.what))
		}
	}
	if md := s.MemoryDump; md != nil && md.ReadOnly {
		errs = append(errs, unsupported(vp.Child("memoryDump", "readOnly"), "read-only memoryDump volumes: the dump is written into the claim"))
	}
	if hd := s.HostDisk; hd != nil && hd.Shared != nil && *hd.Shared {
		errs = append(errs, unsupported(vp.Child("hostDisk", "shared"), "shared host disks"))
	}
	return errs
}
