/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func quantities(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func TestFirmwareUUIDIsKubeVirts(t *testing.T) {
	// RFC 4122 version 5 by hand: SHA-1 of KubeVirt's namespace UUID and the name.
	ns, _ := hex.DecodeString("6a1a24a1406146078bf4a3963d0c5895")
	sum := sha1.Sum(append(ns, "vm-cirros"...))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	want := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	if got := FirmwareUUID("vm-cirros"); string(got) != want {
		t.Errorf("FirmwareUUID(vm-cirros) = %s, want %s", got, want)
	}
	if FirmwareUUID("a") == FirmwareUUID("b") {
		t.Error("different names share a UUID")
	}
}

func TestSetVMIDefaults(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "testvmi", Namespace: "default", Finalizers: []string{"other"}},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Resources: v1.ResourceRequirements{Requests: quantities("memory", "128Mi")},
				Devices: v1.Devices{Disks: []v1.Disk{
					{Name: "root"},
					{Name: "iso", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{}}},
					{Name: "data", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
				}},
			},
			Volumes: []v1.Volume{
				{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/x/y:v1"}}},
				{Name: "iso", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/x/iso"}}},
				{Name: "data", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}},
				{Name: "cloudinit", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config"}}},
			},
		},
	}
	SetVMIDefaults(vmi, StaticConfig{})
	s := vmi.Spec
	d := s.Domain
	checks := []struct {
		what      string
		got, want any
	}{
		{"machine type", d.Machine.Type, "q35"},
		{"architecture", s.Architecture, "amd64"},
		{"topology", *d.CPU, v1.CPU{Sockets: 1, Cores: 1, Threads: 1}},
		{"guest memory", d.Memory.Guest.String(), "128Mi"},
		{"acpi", *d.Features.ACPI.Enabled, true},
		{"uuid", d.Firmware.UUID, FirmwareUUID("testvmi")},
		{"grace period", *s.TerminationGracePeriodSeconds, int64(30)},
		{"finalizers", vmi.Finalizers, []string{"other", v1.VirtualMachineInstanceFinalizer}},
		{"phase", vmi.Status.Phase, v1.Pending},
		{"disk count", len(d.Devices.Disks), 4},
		{"root bus", d.Devices.Disks[0].Disk.Bus, v1.DiskBusSATA},
		{"cdrom bus", d.Devices.Disks[1].CDRom.Bus, v1.DiskBusSATA},
		{"cdrom readonly", *d.Devices.Disks[1].CDRom.ReadOnly, true},
		{"cdrom tray", d.Devices.Disks[1].CDRom.Tray, v1.TrayStateClosed},
		{"explicit bus kept", d.Devices.Disks[2].Disk.Bus, v1.DiskBusVirtio},
		{"added disk", d.Devices.Disks[3].Name, "cloudinit"},
		{"added disk bus", d.Devices.Disks[3].Disk.Bus, v1.DiskBusSATA},
		{"tagged pull policy", s.Volumes[0].ContainerDisk.ImagePullPolicy, corev1.PullIfNotPresent},
		{"untagged pull policy", s.Volumes[1].ContainerDisk.ImagePullPolicy, corev1.PullAlways},
		{"interfaces", d.Devices.Interfaces, []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}}},
		{"networks", s.Networks, []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}},
	}
	for _, c := range checks {
		if !equality.Semantic.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.what, c.got, c.want)
		}
	}

	// Defaulting twice changes nothing: the webhook may see its own output.
	again := vmi.DeepCopy()
	SetVMIDefaults(again, StaticConfig{})
	if !equality.Semantic.DeepEqual(again, vmi) {
		t.Error("SetVMIDefaults is not idempotent")
	}
}

func TestSetVMISpecDefaultsTable(t *testing.T) {
	for name, tc := range map[string]struct {
		in    v1.VirtualMachineInstanceSpec
		check func(t *testing.T, s *v1.VirtualMachineInstanceSpec)
	}{
		"sockets from cpu limit, rounded up": {
			in: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Resources: v1.ResourceRequirements{
				Requests: quantities("cpu", "1"), Limits: quantities("cpu", "2500m")}}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if !reflect.DeepEqual(*s.Domain.CPU, v1.CPU{Sockets: 3, Cores: 1, Threads: 1}) {
					t.Errorf("cpu = %+v", *s.Domain.CPU)
				}
			},
		},
		"sockets from cpu request": {
			in: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Resources: v1.ResourceRequirements{Requests: quantities("cpu", "4")}}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if s.Domain.CPU.Sockets != 4 {
					t.Errorf("sockets = %d", s.Domain.CPU.Sockets)
				}
			},
		},
		"partial topology: the rest is 1": {
			in: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{CPU: &v1.CPU{Cores: 4, Model: "host-model"},
				Resources: v1.ResourceRequirements{Limits: quantities("cpu", "8")}}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if !reflect.DeepEqual(*s.Domain.CPU, v1.CPU{Sockets: 1, Cores: 4, Threads: 1, Model: "host-model"}) {
					t.Errorf("cpu = %+v", *s.Domain.CPU)
				}
			},
		},
		"memory limit fills request and guest": {
			in: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Resources: v1.ResourceRequirements{Limits: quantities("memory", "1Gi")}}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if got := s.Domain.Resources.Requests.Memory().String(); got != "1Gi" {
					t.Errorf("request = %s", got)
				}
				if got := s.Domain.Memory.Guest.String(); got != "1Gi" {
					t.Errorf("guest = %s", got)
				}
			},
		},
		"guest fills request": {
			in: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: qty("512Mi")}}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if got := s.Domain.Resources.Requests.Memory().String(); got != "512Mi" {
					t.Errorf("request = %s", got)
				}
			},
		},
		"guest kept below request": {
			in: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: qty("256Mi")},
				Resources: v1.ResourceRequirements{Requests: quantities("memory", "1Gi")}}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if s.Domain.Memory.Guest.String() != "256Mi" || s.Domain.Resources.Requests.Memory().String() != "1Gi" {
					t.Errorf("memory = %s / %s", s.Domain.Memory.Guest, s.Domain.Resources.Requests.Memory())
				}
			},
		},
		"no memory stays unset": {
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if s.Domain.Memory != nil || s.Domain.Resources.Requests != nil {
					t.Errorf("memory = %+v, requests = %v", s.Domain.Memory, s.Domain.Resources.Requests)
				}
			},
		},
		"autoattachPodInterface false: no interface": {
			in: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Devices: v1.Devices{AutoattachPodInterface: ptr(false)}}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if len(s.Domain.Devices.Interfaces)+len(s.Networks) != 0 {
					t.Errorf("interfaces %v, networks %v", s.Domain.Devices.Interfaces, s.Networks)
				}
			},
		},
		"networks given: no default interface": {
			in: v1.VirtualMachineInstanceSpec{Networks: []v1.Network{{Name: "net", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				if len(s.Domain.Devices.Interfaces) != 0 {
					t.Errorf("interfaces %v", s.Domain.Devices.Interfaces)
				}
			},
		},
		"explicit values kept": {
			in: v1.VirtualMachineInstanceSpec{TerminationGracePeriodSeconds: ptr(int64(180)), Domain: v1.DomainSpec{
				Machine:  &v1.Machine{Type: "pc-q35-rhel9.2.0"},
				Features: &v1.Features{ACPI: v1.FeatureState{Enabled: ptr(false)}},
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "c", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{
					Bus: v1.DiskBusSCSI, ReadOnly: ptr(false), Tray: v1.TrayStateOpen}}}}},
			}},
			check: func(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
				c := s.Domain.Devices.Disks[0].CDRom
				if s.Domain.Machine.Type != "pc-q35-rhel9.2.0" || *s.Domain.Features.ACPI.Enabled || *s.TerminationGracePeriodSeconds != 180 ||
					c.Bus != v1.DiskBusSCSI || *c.ReadOnly || c.Tray != v1.TrayStateOpen {
					t.Errorf("explicit values overwritten: %+v", s)
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := tc.in.DeepCopy()
			SetVMISpecDefaults(s, StaticConfig{})
			tc.check(t, s)
		})
	}
}

func TestSetVMDefaults(t *testing.T) {
	halted := v1.RunStrategyHalted
	vm := &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1"},
		Spec:       v1.VirtualMachineSpec{RunStrategy: &halted, Template: &v1.VirtualMachineInstanceTemplateSpec{}},
	}
	SetVMDefaults(vm, StaticConfig{})
	tmpl := vm.Spec.Template.Spec
	if tmpl.Domain.Machine.Type != "q35" || tmpl.Architecture != "amd64" || tmpl.Domain.Firmware.UUID != FirmwareUUID("vm1") {
		t.Errorf("template = %+v", tmpl)
	}
	// Only what KubeVirt sets at VM admission: the VMI defaults come when the VMI is made.
	if tmpl.Domain.CPU != nil || tmpl.TerminationGracePeriodSeconds != nil || len(tmpl.Networks) != 0 {
		t.Errorf("VMI defaults leaked into the VM: %+v", tmpl)
	}
	if *vm.Spec.RunStrategy != v1.RunStrategyHalted || vm.Spec.Running != nil {
		t.Error("run strategy changed")
	}
	SetVMDefaults(&v1.VirtualMachine{}, StaticConfig{}) // no template: nothing to do, no panic
}

func TestSetMigrationDefaults(t *testing.T) {
	m := &v1.VirtualMachineInstanceMigration{Spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: "vmi1"}}
	SetMigrationDefaults(m)
	SetMigrationDefaults(m)
	if m.Labels[v1.MigrationSelectorLabel] != "vmi1" {
		t.Errorf("labels = %v", m.Labels)
	}
	if len(m.Finalizers) != 1 || m.Finalizers[0] != "kubevirt.io/migrationJobFinalize" {
		t.Errorf("finalizers = %v", m.Finalizers)
	}
}
