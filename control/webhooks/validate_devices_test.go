/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func disk(name string, bus v1.DiskBus) v1.Disk {
	return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: bus}}}
}

func TestValidateDisksAndVolumes(t *testing.T) {
	hostDisk := func(hd v1.HostDisk) func(s *v1.VirtualMachineInstanceSpec) {
		return func(s *v1.VirtualMachineInstanceSpec) {
			addDisk(s, disk("host", v1.DiskBusSCSI), v1.VolumeSource{HostDisk: &hd})
		}
	}
	cloudInit := func(ci v1.CloudInitNoCloudSource) func(s *v1.VirtualMachineInstanceSpec) {
		return func(s *v1.VirtualMachineInstanceSpec) { s.Volumes[1].CloudInitNoCloud = &ci }
	}
	hostDiskGate := StaticConfig{FeatureGateHostDisk: true}
	runRuleCases(t, []ruleCase{
		{"disk names no volume", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[0].Name = "nosuchvolume" },
			"spec.domain.devices.disks[0].name", field.ErrorTypeInvalid, "spec.domain.devices.disks[0].Name 'nosuchvolume' not found."},
		{"volume without disk", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks = s.Domain.Devices.Disks[:1] },
			"spec.volumes[1].name", field.ErrorTypeInvalid, "spec.volumes[1].name 'cloudinit' not found."},
		{"duplicate disk", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[1].Name = "root" },
			"spec.domain.devices.disks[1].name", field.ErrorTypeDuplicate, "spec.domain.devices.disks[1] and spec.domain.devices.disks[0] must not have the same Name."},
		{"duplicate volume", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Volumes = append(s.Volumes, s.Volumes[0]) },
			"spec.volumes[2].name", field.ErrorTypeDuplicate, "must not have the same Name."},
		{"volume without name", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Volumes[0].Name = "" },
			"spec.volumes[0].name", field.ErrorTypeRequired, "is a required field"},
		{"disk name not a DNS label", nil, func(s *v1.VirtualMachineInstanceSpec) {
			addDisk(s, disk("Data_Disk", v1.DiskBusVirtio), emptyDisk)
		}, "spec.domain.devices.disks[2].name", field.ErrorTypeInvalid, "RFC 1123"},
		{"two targets", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Disks[0].CDRom = &v1.CDRomTarget{Bus: v1.DiskBusSATA}
		},
			"spec.domain.devices.disks[0]", field.ErrorTypeInvalid, "can only have a single target type defined"},
		{"volume without source", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Volumes[0].ContainerDisk = nil },
			"spec.volumes[0]", field.ErrorTypeInvalid, "spec.volumes[0] must have exactly one source type set"},
		{"volume with two sources", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Volumes[0].EmptyDisk = emptyDisk.EmptyDisk },
			"spec.volumes[0]", field.ErrorTypeInvalid, "must have exactly one source type set"},
		{"usb bus", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusUSB },
			"spec.domain.devices.disks[0].disk.bus", field.ErrorTypeNotSupported, "qvirt does not support the usb disk bus"},
		{"ide bus", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[0].Disk.Bus = "ide" },
			"spec.domain.devices.disks[0].disk.bus", field.ErrorTypeInvalid, "IDE bus is not supported"},
		{"unknown bus", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[0].Disk.Bus = "nvme" },
			"spec.domain.devices.disks[0].disk.bus", field.ErrorTypeInvalid, "unrecognized bus nvme, must be one of: [virtio sata scsi]"},
		{"cdrom on virtio", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Disks[1].DiskDevice = v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusVirtio}}
		}, "spec.domain.devices.disks[1].cdrom.bus", field.ErrorTypeInvalid, "Bus type virtio is invalid for CD-ROM device"},
		{"read-only sata disk", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Disks[0].Disk = &v1.DiskTarget{Bus: v1.DiskBusSATA, ReadOnly: true}
		}, "spec.domain.devices.disks[0].disk.bus", field.ErrorTypeInvalid, "sata hard-disks do not support read-only."},
		{"seven sata devices", nil, func(s *v1.VirtualMachineInstanceSpec) {
			for i := 0; i < 7; i++ {
				addDisk(s, disk(fmt.Sprintf("d%d", i), v1.DiskBusSATA), emptyDisk)
			}
		}, "spec.domain.devices.disks", field.ErrorTypeTooMany, "at most 6 devices on the sata bus (got 7)"},
		{"boot order zero", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[0].BootOrder = ptr(uint(0)) },
			"spec.domain.devices.disks[0].bootOrder", field.ErrorTypeInvalid, "spec.domain.devices.disks[0] must have a boot order > 0, if supplied"},
		{"boot order twice", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[1].BootOrder = ptr(uint(1)) },
			"spec.domain.devices.disks[1].bootOrder", field.ErrorTypeInvalid, "Boot order for spec.domain.devices.disks[1].bootOrder already set for a different device."},
		{"boot order shared with an interface", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Interfaces[0].BootOrder = ptr(uint(1)) },
			"spec.domain.devices.interfaces[0].bootOrder", field.ErrorTypeInvalid, "already set for a different device"},
		{"disk serial", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[0].Serial = "has space" },
			"spec.domain.devices.disks[0].serial", field.ErrorTypeInvalid, "[A-Za-z0-9_.+-]"},
		{"disk serial length", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks[0].Serial = strings.Repeat("x", 300) },
			"spec.domain.devices.disks[0].serial", field.ErrorTypeInvalid, "less than or equal to 256 in length"},
		{"containerDisk without image", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Volumes[0].ContainerDisk.Image = "" },
			"spec.volumes[0].containerDisk.image", field.ErrorTypeRequired, "is a required field"},
		{"containerDisk path to root", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Volumes[0].ContainerDisk.Path = "/" },
			"spec.volumes[0].containerDisk", field.ErrorTypeInvalid, "must not point to root"},
		{"emptyDisk without capacity", nil, func(s *v1.VirtualMachineInstanceSpec) {
			addDisk(s, disk("scratch", v1.DiskBusVirtio), v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}})
		}, "spec.volumes[2].emptyDisk.capacity", field.ErrorTypeRequired, "must be greater than 0"},
		{"pvc without claim", nil, func(s *v1.VirtualMachineInstanceSpec) {
			addDisk(s, disk("data", v1.DiskBusVirtio), v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}})
		}, "spec.volumes[2].persistentVolumeClaim.claimName", field.ErrorTypeRequired, "is a required field"},
		{"hostDisk without gate", nil, hostDisk(v1.HostDisk{Path: "/data/d.img", Type: v1.HostDiskExists}),
			"spec.volumes[2].hostDisk", field.ErrorTypeInvalid, "HostDisk feature gate is not enabled"},
		{"hostDisk without path", hostDiskGate, hostDisk(v1.HostDisk{Type: v1.HostDiskExists}),
			"spec.volumes[2].hostDisk.path", field.ErrorTypeRequired, "is required for hostDisk volume"},
		{"hostDisk type", hostDiskGate, hostDisk(v1.HostDisk{Path: "/d.img", Type: "File"}),
			"spec.volumes[2].hostDisk.type", field.ErrorTypeInvalid, "has invalid value 'File', allowed are 'Disk' or 'DiskOrCreate'"},
		{"hostDisk capacity with type Disk", hostDiskGate, hostDisk(v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExists, Capacity: resource.MustParse("1Gi")}),
			"spec.volumes[2].hostDisk.capacity", field.ErrorTypeInvalid, "is allowed to pass only with spec.volumes[2].hostDisk.type equal to 'DiskOrCreate'"},
		{"hostDisk DiskOrCreate without capacity", hostDiskGate, hostDisk(v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExistsOrCreate}),
			"spec.volumes[2].hostDisk.capacity", field.ErrorTypeRequired, "is required when"},
		{"cloud-init without data", nil, cloudInit(v1.CloudInitNoCloudSource{}),
			"spec.volumes[1].cloudInitNoCloud", field.ErrorTypeInvalid, "must have at least one userdatasource or one networkdatasource set."},
		{"cloud-init two user data", nil, cloudInit(v1.CloudInitNoCloudSource{UserData: "a", UserDataBase64: "YQ=="}),
			"spec.volumes[1].cloudInitNoCloud", field.ErrorTypeInvalid, "must have only one userdatasource set."},
		{"cloud-init bad base64", nil, cloudInit(v1.CloudInitNoCloudSource{UserDataBase64: "not base64!"}),
			"spec.volumes[1].cloudInitNoCloud.userDataBase64", field.ErrorTypeInvalid, "is not a valid base64 value."},
		{"cloud-init too long", nil, cloudInit(v1.CloudInitNoCloudSource{UserData: strings.Repeat("#", 2049)}),
			"spec.volumes[1].cloudInitNoCloud", field.ErrorTypeInvalid, "userdata exceeds 2048 byte limit"},
		{"cloud-init network data too long", nil, cloudInit(v1.CloudInitNoCloudSource{NetworkData: strings.Repeat("#", 2049)}),
			"spec.volumes[1].cloudInitNoCloud", field.ErrorTypeInvalid, "networkdata exceeds 2048 byte limit"},
	})
}

func TestValidHostDiskWithGate(t *testing.T) {
	s := baseSpec()
	addDisk(s, disk("host", v1.DiskBusSCSI), v1.VolumeSource{HostDisk: &v1.HostDisk{
		Path: "/var/lib/qvirt/d.img", Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Gi")}})
	if errs := ValidateVMISpec(field.NewPath("spec"), s, StaticConfig{FeatureGateHostDisk: true}); len(errs) > 0 {
		t.Errorf("refused: %v", errs)
	}
}
