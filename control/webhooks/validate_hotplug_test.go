/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func hotplugClaim(claim string) v1.VolumeSource {
	return v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}, Hotpluggable: true}}
}

func memoryDump(claim string) v1.Volume {
	return v1.Volume{Name: claim, VolumeSource: v1.VolumeSource{MemoryDump: &v1.MemoryDumpVolumeSource{
		PersistentVolumeClaimVolumeSource: v1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}, Hotpluggable: true}}}}
}

func TestHotplugVolumesAccepted(t *testing.T) {
	for name, edit := range map[string]func(s *v1.VirtualMachineInstanceSpec){
		"hotpluggable claim on scsi": func(s *v1.VirtualMachineInstanceSpec) { addDisk(s, disk("data", v1.DiskBusSCSI), hotplugClaim("data")) },
		"hotpluggable claim on virtio": func(s *v1.VirtualMachineInstanceSpec) {
			addDisk(s, disk("data", v1.DiskBusVirtio), hotplugClaim("data"))
		},
		"memoryDump volume without a disk": func(s *v1.VirtualMachineInstanceSpec) {
			s.Volumes = append(s.Volumes, memoryDump("dump"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			edit(s)
			if errs := ValidateVMISpec(field.NewPath("spec"), s, StaticConfig{}); len(errs) > 0 {
				t.Errorf("refused: %v", errs)
			}
		})
	}
}

func TestHotplugVolumeRules(t *testing.T) {
	type spec = v1.VirtualMachineInstanceSpec
	runRuleCases(t, []ruleCase{
		{"hotplugged disk on sata", nil, func(s *spec) { addDisk(s, disk("data", v1.DiskBusSATA), hotplugClaim("data")) },
			"spec.domain.devices.disks[2].disk.bus", field.ErrorTypeInvalid, "Hotplug configuration for disk [data] requires bus to be 'scsi' or 'virtio'. [sata] is not permitted."},
		{"hotplugged disk with hotplug disabled", nil, func(s *spec) {
			s.Domain.Devices.DisableHotplug = true
			addDisk(s, disk("data", v1.DiskBusSCSI), hotplugClaim("data"))
		}, "spec.domain.devices.disableHotplug", field.ErrorTypeInvalid, "spec.domain.devices.disableHotplug is true: the VM has no room for hotplugged disks"},
		{"hotplugged cdrom", nil, func(s *spec) {
			addDisk(s, v1.Disk{Name: "data", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSCSI, ReadOnly: ptr(true)}}}, hotplugClaim("data"))
		}, "spec.domain.devices.disks[2]", field.ErrorTypeInvalid, "Hotplug configuration for [data] requires diskDevice of type 'disk' to be used."},
		{"hotplugged lun", nil, func(s *spec) {
			addDisk(s, v1.Disk{Name: "data", DiskDevice: v1.DiskDevice{LUN: &v1.LunTarget{Bus: v1.DiskBusSCSI}}}, hotplugClaim("data"))
		}, "spec.domain.devices.disks[2]", field.ErrorTypeInvalid, "requires diskDevice of type 'disk'"},
		{"disk on a memoryDump volume", nil, func(s *spec) { addDisk(s, disk("dump", v1.DiskBusSCSI), memoryDump("dump").VolumeSource) },
			"spec.domain.devices.disks[2].name", field.ErrorTypeInvalid, "names memoryDump volume dump"},
		{"memoryDump without a claim", nil, func(s *spec) { s.Volumes = append(s.Volumes, memoryDump("")) },
			"spec.volumes[2].memoryDump.claimName", field.ErrorTypeRequired, "is a required field"},
		{"two memoryDump volumes", nil, func(s *spec) { s.Volumes = append(s.Volumes, memoryDump("a"), memoryDump("b")) },
			"spec.volumes", field.ErrorTypeInvalid, "spec.volumes must have max one memory dump volume set"},
		{"memoryDump next to another source", nil, func(s *spec) {
			v := memoryDump("dump")
			v.EmptyDisk = emptyDisk.EmptyDisk
			s.Volumes = append(s.Volumes, v)
		}, "spec.volumes[2]", field.ErrorTypeInvalid, "must have exactly one source type set"},
		{"read-only memoryDump", nil, func(s *spec) {
			v := memoryDump("dump")
			v.MemoryDump.ReadOnly = true
			s.Volumes = append(s.Volumes, v)
		}, "spec.volumes[2].memoryDump.readOnly", field.ErrorTypeNotSupported, "qvirt does not support read-only memoryDump volumes"},
		{"hotpluggable dataVolume", nil, func(s *spec) {
			addDisk(s, disk("dv", v1.DiskBusSCSI), v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv", Hotpluggable: true}})
		}, "spec.volumes[2].dataVolume", field.ErrorTypeNotSupported, "qvirt does not support dataVolume volumes"},
	})
}

func TestHotplugDefaults(t *testing.T) {
	s := &v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{
		{Name: "data", VolumeSource: hotplugClaim("data")},
		{Name: "plain", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "plain"}}}},
		memoryDump("dump"),
	}}
	SetVMISpecDefaults(s, StaticConfig{})
	buses := map[string]v1.DiskBus{}
	for _, d := range s.Domain.Devices.Disks {
		buses[d.Name] = d.Disk.Bus
	}
	if len(buses) != 2 || buses["data"] != v1.DiskBusSCSI || buses["plain"] != v1.DiskBusSATA {
		t.Errorf("disks %+v", s.Domain.Devices.Disks)
	}
}

func TestHotplugInVMTemplate(t *testing.T) {
	s := baseVMSpec()
	tmpl := &s.Template.Spec
	// As the VM controller writes it for addvolume and memorydump.
	tmpl.Volumes = append(tmpl.Volumes, v1.Volume{Name: "data", VolumeSource: hotplugClaim("data")}, memoryDump("dump"))
	tmpl.Domain.Devices.Disks = append(tmpl.Domain.Devices.Disks, disk("data", v1.DiskBusSCSI))
	if errs := ValidateVMSpec(field.NewPath("spec"), s, StaticConfig{}); len(errs) > 0 {
		t.Fatalf("refused: %v", errs)
	}
	tmpl.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusSATA
	expectError(t, ValidateVMSpec(field.NewPath("spec"), s, StaticConfig{}), "spec.template.spec.domain.devices.disks[0].disk.bus", field.ErrorTypeInvalid, "[sata] is not permitted")
}

func TestHotplugUpdates(t *testing.T) {
	priv := Privileges{Users: []string{"system:serviceaccount:kubevirt:kubevirt-controller"}}
	controller := authenticationv1.UserInfo{Username: "system:serviceaccount:kubevirt:kubevirt-controller"}
	alice := authenticationv1.UserInfo{Username: "alice"}
	old := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: *baseSpec()}
	addDisk(&old.Spec, disk("data", v1.DiskBusSCSI), hotplugClaim("data"))
	old.Status.Phase = v1.Running

	type vmi = v1.VirtualMachineInstance
	for _, tc := range []struct {
		name  string
		user  authenticationv1.UserInfo
		edit  func(n *vmi)
		field string // empty: allowed
		msg   string
	}{
		{"hotplug a claim", controller, func(n *vmi) { addDisk(&n.Spec, disk("more", v1.DiskBusVirtio), hotplugClaim("more")) }, "", ""},
		{"unplug a claim", controller, func(n *vmi) {
			n.Spec.Volumes, n.Spec.Domain.Devices.Disks = n.Spec.Volumes[:2], n.Spec.Domain.Devices.Disks[:2]
		}, "", ""},
		{"attach a memory dump claim", controller, func(n *vmi) { n.Spec.Volumes = append(n.Spec.Volumes, memoryDump("dump")) }, "", ""},
		{"shorten the grace period", controller, func(n *vmi) { n.Spec.TerminationGracePeriodSeconds = ptr(int64(0)) }, "", ""},
		{"user hotplugs", alice, func(n *vmi) { addDisk(&n.Spec, disk("more", v1.DiskBusVirtio), hotplugClaim("more")) },
			"spec", "update of VMI object is restricted"},
		{"other spec change", controller, func(n *vmi) { n.Spec.Domain.CPU.Cores = 2 },
			"spec.domain.cpu.cores", "spec.domain.cpu.cores cannot change on an existing VMI: only hotplugged volumes and their disks may be added or removed"},
		{"add a permanent volume", controller, func(n *vmi) { addDisk(&n.Spec, disk("more", v1.DiskBusVirtio), emptyDisk) },
			"spec.volumes[3]", "volume more cannot be added to an existing VMI"},
		{"remove a permanent volume", controller, func(n *vmi) {
			n.Spec.Volumes, n.Spec.Domain.Devices.Disks = n.Spec.Volumes[1:], n.Spec.Domain.Devices.Disks[1:]
		}, "spec.volumes", "permanent volume root cannot be removed"},
		{"change a permanent volume", controller, func(n *vmi) { n.Spec.Volumes[0].ContainerDisk.Image = "other:1" },
			"spec.volumes[0]", "permanent volume root, changed"},
		{"change a permanent disk", controller, func(n *vmi) { n.Spec.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusSCSI },
			"spec.domain.devices.disks[0]", "permanent disk root, changed"},
		{"change a hotplugged volume", controller, func(n *vmi) { n.Spec.Volumes[2].PersistentVolumeClaim.ClaimName = "other" },
			"spec.volumes[2]", "hotplug volume data, changed"},
		{"change a hotplugged disk", controller, func(n *vmi) { n.Spec.Domain.Devices.Disks[2].Disk.Bus = v1.DiskBusVirtio },
			"spec.domain.devices.disks[2]", "hotplug disk data, changed"},
		{"hotplug on sata", controller, func(n *vmi) { addDisk(&n.Spec, disk("more", v1.DiskBusSATA), hotplugClaim("more")) },
			"spec.domain.devices.disks[3].disk.bus", "[sata] is not permitted"},
		{"hotplug without a disk", controller, func(n *vmi) {
			n.Spec.Volumes = append(n.Spec.Volumes, v1.Volume{Name: "more", VolumeSource: hotplugClaim("more")})
		}, "spec.volumes[3].name", "spec.volumes[3].name 'more' not found."},
		{"hotplug without a claim name", controller, func(n *vmi) { addDisk(&n.Spec, disk("more", v1.DiskBusSCSI), hotplugClaim("")) },
			"spec.volumes[3].persistentVolumeClaim.claimName", "is a required field"},
		{"add a disk alone", controller, func(n *vmi) {
			n.Spec.Domain.Devices.Disks = append(n.Spec.Domain.Devices.Disks, disk("more", v1.DiskBusSCSI))
		},
			"spec.domain.devices.disks[3]", "disk more cannot be added to an existing VMI but with the hotplugged volume it shows"},
		{"remove the disk of a permanent volume", controller, func(n *vmi) { n.Spec.Domain.Devices.Disks = n.Spec.Domain.Devices.Disks[1:] },
			"spec.domain.devices.disks", "disk root cannot be removed"},
		{"hotplug with a cache mode", controller, func(n *vmi) {
			d := disk("more", v1.DiskBusSCSI)
			d.Cache = v1.CacheNone
			addDisk(&n.Spec, d, hotplugClaim("more"))
		}, "spec.domain.devices.disks[3].cache", "qvirt does not support disk cache modes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := old.DeepCopy()
			tc.edit(n)
			errs := ValidateVMIUpdate(old, n, tc.user, priv)
			if tc.field == "" {
				if len(errs) > 0 {
					t.Errorf("refused: %v", errs)
				}
				return
			}
			expectError(t, errs, tc.field, "", tc.msg)
		})
	}
}

func TestGracePeriodUpdateIsNotJudgedByNewerRules(t *testing.T) {
	priv := Privileges{Users: []string{"system:serviceaccount:kubevirt:kubevirt-apiserver"}}
	apiserver := authenticationv1.UserInfo{Username: "system:serviceaccount:kubevirt:kubevirt-apiserver"}
	// Stored before disks on memoryDump volumes were refused.
	old := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: *baseSpec()}
	addDisk(&old.Spec, disk("dump", v1.DiskBusSATA), memoryDump("dump").VolumeSource)
	n := old.DeepCopy()
	n.Spec.TerminationGracePeriodSeconds = ptr(int64(5))
	if errs := ValidateVMIUpdate(old, n, apiserver, priv); len(errs) > 0 {
		t.Errorf("stop with a grace period refused: %v", errs)
	}
}
