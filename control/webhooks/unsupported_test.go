/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestUnsupportedIsRefused(t *testing.T) {
	type spec = v1.VirtualMachineInstanceSpec
	volume := func(src v1.VolumeSource) func(s *spec) {
		return func(s *spec) { addDisk(s, disk("extra", v1.DiskBusVirtio), src) }
	}
	devices := func(edit func(d *v1.Devices)) func(s *spec) {
		return func(s *spec) { edit(&s.Domain.Devices) }
	}
	rootDisk := func(edit func(d *v1.Disk)) func(s *spec) {
		return func(s *spec) { edit(&s.Domain.Devices.Disks[0]) }
	}
	iface := func(edit func(in *v1.Interface)) func(s *spec) {
		return func(s *spec) { edit(&s.Domain.Devices.Interfaces[0]) }
	}
	var cases []ruleCase
	for _, c := range []struct {
		field string
		edit  func(s *spec)
	}{
		{"spec.architecture", func(s *spec) { s.Architecture = "arm64" }},
		{"spec.readinessProbe", func(s *spec) { s.ReadinessProbe = &v1.Probe{} }},
		{"spec.livenessProbe", func(s *spec) { s.LivenessProbe = &v1.Probe{} }},
		{"spec.domain.resources.requests.nvidia.com/gpu", func(s *spec) {
			s.Domain.Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
		}},
		{"spec.domain.resources.limits.hugepages-2Mi", func(s *spec) { s.Domain.Resources.Limits = quantities("hugepages-2Mi", "1Gi") }},
		{"spec.domain.cpu.features", func(s *spec) { s.Domain.CPU.Features = []v1.CPUFeature{{Name: "vmx"}} }},
		{"spec.domain.cpu.dedicatedCpuPlacement", func(s *spec) { s.Domain.CPU.DedicatedCPUPlacement = true }},
		{"spec.domain.cpu.isolateEmulatorThread", func(s *spec) { s.Domain.CPU.IsolateEmulatorThread = true }},
		{"spec.domain.cpu.maxSockets", func(s *spec) { s.Domain.CPU.MaxSockets = 4 }},
		{"spec.domain.memory.hugepages", func(s *spec) { s.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"} }},
		{"spec.domain.memory.maxGuest", func(s *spec) { s.Domain.Memory.MaxGuest = qty("4Gi") }},
		{"spec.domain.firmware.bootloader.efi", func(s *spec) {
			s.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr(true)}}
		}},
		{"spec.domain.firmware.bootloader.bios.useSerial", func(s *spec) {
			s.Domain.Firmware.Bootloader = &v1.Bootloader{BIOS: &v1.BIOS{UseSerial: ptr(true)}}
		}},
		{"spec.domain.clock.timezone", func(s *spec) {
			tz := v1.ClockOffsetTimezone("Europe/Paris")
			s.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &tz}}
		}},
		{"spec.domain.clock.utc.offsetSeconds", func(s *spec) {
			s.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{OffsetSeconds: ptr(3600)}}}
		}},
		{"spec.domain.clock.timer", func(s *spec) { s.Domain.Clock = &v1.Clock{Timer: &v1.Timer{}} }},
		{"spec.domain.features.apic", func(s *spec) { s.Domain.Features.APIC = &v1.FeatureAPIC{Enabled: ptr(false)} }},
		{"spec.domain.features.hyperv", func(s *spec) { s.Domain.Features.Hyperv = &v1.FeatureHyperv{} }},
		{"spec.domain.features.smm", func(s *spec) { s.Domain.Features.SMM = &v1.FeatureState{} }},
		{"spec.domain.features.kvm", func(s *spec) { s.Domain.Features.KVM = &v1.FeatureKVM{Hidden: true} }},
		{"spec.domain.features.pvspinlock", func(s *spec) { s.Domain.Features.Pvspinlock = &v1.FeatureState{} }},
		{"spec.domain.devices.useVirtioTransitional", devices(func(d *v1.Devices) { d.UseVirtioTransitional = ptr(true) })},
		{"spec.domain.devices.watchdog", devices(func(d *v1.Devices) { d.Watchdog = &v1.Watchdog{Name: "w"} })},
		{"spec.domain.devices.inputs", devices(func(d *v1.Devices) { d.Inputs = []v1.Input{{Name: "t", Type: "tablet"}} })},
		{"spec.domain.devices.autoattachInputDevice", devices(func(d *v1.Devices) { d.AutoattachInputDevice = ptr(true) })},
		{"spec.domain.devices.logSerialConsole", devices(func(d *v1.Devices) { d.LogSerialConsole = ptr(true) })},
		{"spec.domain.devices.blockMultiQueue", devices(func(d *v1.Devices) { d.BlockMultiQueue = ptr(true) })},
		{"spec.domain.devices.networkInterfaceMultiqueue", devices(func(d *v1.Devices) { d.NetworkInterfaceMultiQueue = ptr(true) })},
		{"spec.domain.devices.tpm", devices(func(d *v1.Devices) { d.TPM = &v1.TPMDevice{} })},
		{"spec.domain.devices.disks[0].lun", rootDisk(func(d *v1.Disk) { d.DiskDevice = v1.DiskDevice{LUN: &v1.LunTarget{Bus: v1.DiskBusSCSI}} })},
		{"spec.domain.devices.disks[0].disk.pciAddress", rootDisk(func(d *v1.Disk) { d.Disk.PciAddress = "0000:81:01.0" })},
		{"spec.domain.devices.disks[0].cdrom.readonly", rootDisk(func(d *v1.Disk) {
			d.DiskDevice = v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA, ReadOnly: ptr(false)}}
		})},
		{"spec.domain.devices.disks[0].cdrom.tray", rootDisk(func(d *v1.Disk) {
			d.DiskDevice = v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA, Tray: v1.TrayStateOpen}}
		})},
		{"spec.domain.devices.disks[0].dedicatedIOThread", rootDisk(func(d *v1.Disk) { d.DedicatedIOThread = ptr(true) })},
		{"spec.domain.devices.disks[0].cache", rootDisk(func(d *v1.Disk) { d.Cache = v1.CacheNone })},
		{"spec.domain.devices.disks[0].io", rootDisk(func(d *v1.Disk) { d.IO = v1.IONative })},
		{"spec.domain.devices.disks[0].errorPolicy", rootDisk(func(d *v1.Disk) { d.ErrorPolicy = ptr(v1.DiskErrorPolicyStop) })},
		{"spec.domain.devices.disks[0].tag", rootDisk(func(d *v1.Disk) { d.Tag = "root" })},
		{"spec.domain.devices.disks[0].shareable", rootDisk(func(d *v1.Disk) { d.Shareable = ptr(true) })},
		{"spec.domain.devices.interfaces[0].model", iface(func(in *v1.Interface) { in.Model = "e1000e" })},
		{"spec.domain.devices.interfaces[0].pciAddress", iface(func(in *v1.Interface) { in.PciAddress = "0000:81:00.1" })},
		{"spec.domain.devices.interfaces[0].tag", iface(func(in *v1.Interface) { in.Tag = "net" })},
		{"spec.domain.devices.interfaces[0].acpiIndex", iface(func(in *v1.Interface) { in.ACPIIndex = 2 })},
		{"spec.domain.devices.interfaces[0].state", iface(func(in *v1.Interface) { in.State = v1.InterfaceStateLinkDown })},
		{"spec.volumes[2].cloudInitConfigDrive", volume(v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: "x"}})},
		{"spec.volumes[2].dataVolume", volume(v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}})},
		{"spec.volumes[2].configMap", volume(v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}})},
		{"spec.volumes[2].secret", volume(v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}})},
		{"spec.volumes[2].serviceAccount", volume(v1.VolumeSource{ServiceAccount: &v1.ServiceAccountVolumeSource{ServiceAccountName: "default"}})},
		{"spec.networks[0].pod.vmIPv6NetworkCIDR", func(s *spec) { s.Networks[0].Pod.VMIPv6NetworkCIDR = "fd10:11::/120" }},
		{"spec.volumes[2].hostDisk.shared", volume(v1.VolumeSource{HostDisk: &v1.HostDisk{
			Path: "/d.img", Type: v1.HostDiskExists, Shared: ptr(true)}})},
	} {
		cases = append(cases, ruleCase{name: c.field, gates: StaticConfig{FeatureGateHostDisk: true}, edit: c.edit,
			field: c.field, typ: field.ErrorTypeNotSupported, msg: "qvirt does not support "})
	}
	runRuleCases(t, cases)
}

func TestSupportedNeighboursAreAccepted(t *testing.T) {
	s := baseSpec()
	s.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{}}}
	s.Domain.Features.APIC = &v1.FeatureAPIC{}
	s.Domain.Firmware.Bootloader = &v1.Bootloader{BIOS: &v1.BIOS{}}
	s.Domain.Devices.Interfaces[0].Model = "virtio"
	s.Domain.Devices.Interfaces[0].State = v1.InterfaceStateLinkUp
	s.Domain.Devices.AutoattachGraphicsDevice = ptr(false)
	s.Domain.Devices.AutoattachMemBalloon = ptr(false)
	s.Domain.Devices.AutoattachInputDevice = ptr(false)
	s.Domain.Devices.Rng = &v1.Rng{}
	s.Domain.Devices.DisableHotplug = true
	s.Domain.CPU.Model = v1.CPUModeHostPassthrough
	s.StartStrategy = ptr(v1.StartStrategyPaused)
	s.EvictionStrategy = ptr(v1.EvictionStrategyNone)
	s.Hostname, s.Subdomain = "web-1", "web"
	s.Networks[0].Pod.VMIPv6NetworkCIDR = "fd10:0:2::/120"
	s.NodeSelector = map[string]string{"kubernetes.io/arch": "amd64"}
	if errs := ValidateVMISpec(field.NewPath("spec"), s, StaticConfig{}); len(errs) > 0 {
		t.Errorf("refused: %v", errs)
	}
}
