/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"fmt"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// baseSpec is a small valid VMI spec after defaults: a containerDisk and a
// cloud-init disk on virtio, and the default pod interface.
func baseSpec() *v1.VirtualMachineInstanceSpec {
	s := &v1.VirtualMachineInstanceSpec{
		Domain: v1.DomainSpec{
			Resources: v1.ResourceRequirements{Requests: quantities("memory", "128Mi")},
			Devices: v1.Devices{Disks: []v1.Disk{
				{Name: "root", BootOrder: ptr(uint(1)), DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
				{Name: "cloudinit", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
			}},
		},
		Volumes: []v1.Volume{
			{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/fedora:41"}}},
			{Name: "cloudinit", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}},
		},
	}
	SetVMISpecDefaults(s, StaticConfig{})
	return s
}

// ruleCase breaks one rule of a valid spec and names the error it must cause.
type ruleCase struct {
	name  string
	gates StaticConfig
	edit  func(s *v1.VirtualMachineInstanceSpec)
	field string
	typ   field.ErrorType
	msg   string // a substring of the message
}

func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	if errs := ValidateVMISpec(field.NewPath("spec"), baseSpec(), StaticConfig{}); len(errs) > 0 {
		t.Fatalf("the base spec is invalid: %v", errs)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec()
			tc.edit(s)
			cfg := tc.gates
			if cfg == nil {
				cfg = StaticConfig{}
			}
			errs := ValidateVMISpec(field.NewPath("spec"), s, cfg)
			expectError(t, errs, tc.field, tc.typ, tc.msg)
		})
	}
}

func expectError(t *testing.T, errs field.ErrorList, path string, typ field.ErrorType, msg string) {
	t.Helper()
	for _, e := range errs {
		if e.Field == path && (typ == "" || e.Type == typ) && strings.Contains(e.Detail, msg) {
			return
		}
	}
	var got []string
	for _, e := range errs {
		got = append(got, fmt.Sprintf("%s %s: %s", e.Type, e.Field, e.Detail))
	}
	t.Errorf("want %s at %s containing %q; got:\n  %s", typ, path, msg, strings.Join(got, "\n  "))
}

func addDisk(s *v1.VirtualMachineInstanceSpec, d v1.Disk, src v1.VolumeSource) {
	s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, d)
	s.Volumes = append(s.Volumes, v1.Volume{Name: d.Name, VolumeSource: src})
}

var emptyDisk = v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}

func TestValidateVMISpecCore(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{"zero sockets", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.CPU.Sockets = 0 },
			"spec.domain.cpu.sockets", field.ErrorTypeInvalid, "must be greater than 0"},
		{"too many vCPUs", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.CPU.Sockets, s.Domain.CPU.Cores = 16, 16 },
			"spec.domain.cpu", field.ErrorTypeInvalid, "must not exceed 255 (got 256)"},
		{"bad cpu model", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.CPU.Model = "-bad model" },
			"spec.domain.cpu.model", field.ErrorTypeInvalid, "not a CPU model name"},
		{"negative cpu request", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("-1")
		}, "spec.domain.resources.requests.cpu", field.ErrorTypeInvalid, "must be greater than or equal to 0."},
		{"cpu request above limit", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2")
			s.Domain.Resources.Limits = quantities("cpu", "1")
		}, "spec.domain.resources.requests.cpu", field.ErrorTypeInvalid, "spec.domain.resources.requests.cpu '2' is greater than spec.domain.resources.limits.cpu '1'"},
		{"no memory", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Memory = nil; s.Domain.Resources.Requests = nil },
			"spec.domain.resources.requests.memory", field.ErrorTypeRequired, "no memory requested"},
		{"memory request below 1M", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Resources.Requests = quantities("memory", "512k") },
			"spec.domain.resources.requests.memory", field.ErrorTypeInvalid, "spec.domain.resources.requests.memory '512k': must be greater than or equal to 1M."},
		{"negative memory limit", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Resources.Limits = quantities("memory", "-1Gi") },
			"spec.domain.resources.limits.memory", field.ErrorTypeInvalid, "must be greater than or equal to 0."},
		{"memory request above limit", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Resources.Limits = quantities("memory", "64Mi") },
			"spec.domain.resources.requests.memory", field.ErrorTypeInvalid, "'128Mi' is greater than spec.domain.resources.limits.memory '64Mi'"},
		{"guest above limit", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Memory.Guest = qty("2Gi")
			s.Domain.Resources.Limits = quantities("memory", "1Gi")
		}, "spec.domain.memory.guest", field.ErrorTypeInvalid, "spec.domain.memory.guest '2Gi' must be equal to or less than the memory limit spec.domain.resources.limits.memory '1Gi'"},
		{"guest too small", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Memory.Guest = qty("8Mi") },
			"spec.domain.memory.guest", field.ErrorTypeInvalid, "qvirt needs at least 16Mi"},
		{"machine type", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Machine.Type = "virt" },
			"spec.domain.machine.type", field.ErrorTypeInvalid, "spec.domain.machine.type is not supported: virt (allowed values: [q35 pc pc-q35-* pc-i440fx-*])"},
		{"bad firmware uuid", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware.UUID = "not-a-uuid" },
			"spec.domain.firmware.uuid", field.ErrorTypeInvalid, "is not a valid UUID"},
		{"firmware serial characters", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware.Serial = "a b" },
			"spec.domain.firmware.serial", field.ErrorTypeInvalid, "[A-Za-z0-9_.+-]"},
		{"firmware serial length", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Firmware.Serial = strings.Repeat("a", 257) },
			"spec.domain.firmware.serial", field.ErrorTypeInvalid, "less than or equal to 256"},
		{"kernel args without kernel", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware.KernelBoot = &v1.KernelBoot{KernelArgs: "console=ttyS0"}
		}, "spec.domain.firmware.kernelBoot.kernelArgs", field.ErrorTypeInvalid, "kernel arguments cannot be provided without an external kernel"},
		{"kernel boot without image", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware.KernelBoot = &v1.KernelBoot{Container: &v1.KernelBootContainer{KernelPath: "/boot/vmlinuz"}}
		}, "spec.domain.firmware.kernelBoot.container.image", field.ErrorTypeRequired, "must be defined with an image"},
		{"kernel boot without paths", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware.KernelBoot = &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "k:1"}}
		}, "spec.domain.firmware.kernelBoot.container", field.ErrorTypeRequired, "at least one of the following: kernelPath, initrdPath"},
		{"kernel boot with initrd only", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware.KernelBoot = &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "k:1", InitrdPath: "/boot/initrd"}}
		}, "spec.domain.firmware.kernelBoot.container.kernelPath", field.ErrorTypeNotSupported, "qvirt does not support kernelBoot"},
		{"kernel path relative", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware.KernelBoot = &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "k:1", KernelPath: "boot/../vmlinuz"}}
		}, "spec.domain.firmware.kernelBoot.container.kernelPath", field.ErrorTypeInvalid, "must be an absolute path to a file without relative components"},
		{"bios and efi", nil, func(s *v1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware.Bootloader = &v1.Bootloader{BIOS: &v1.BIOS{}, EFI: &v1.EFI{}}
		}, "spec.domain.firmware.bootloader", field.ErrorTypeInvalid, "mutually exclusive"},
		{"hostname", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Hostname = "Not_A_Label" },
			"spec.hostname", field.ErrorTypeInvalid, "DNS_LABEL"},
		{"subdomain", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Subdomain = "-x" },
			"spec.subdomain", field.ErrorTypeInvalid, "DNS_SUBDOMAIN"},
		{"start strategy", nil, func(s *v1.VirtualMachineInstanceSpec) { s.StartStrategy = ptr(v1.StartStrategy("Later")) },
			"spec.startStrategy", field.ErrorTypeInvalid, "spec.startStrategy is set with an unrecognized option: Later"},
		{"eviction strategy", nil, func(s *v1.VirtualMachineInstanceSpec) { s.EvictionStrategy = ptr(v1.EvictionStrategy("Never")) },
			"spec.evictionStrategy", field.ErrorTypeInvalid, "unrecognized option: Never"},
		{"dns policy", nil, func(s *v1.VirtualMachineInstanceSpec) { s.DNSPolicy = "Custom" },
			"spec.dnsPolicy", field.ErrorTypeNotSupported, "DNSPolicy: Custom is not supported"},
		{"dns policy None without servers", nil, func(s *v1.VirtualMachineInstanceSpec) { s.DNSPolicy = corev1.DNSNone },
			"spec.dnsConfig", field.ErrorTypeRequired, "at least one DNS nameserver"},
		{"too many disks", nil, func(s *v1.VirtualMachineInstanceSpec) {
			for i := 0; i < 300; i++ {
				s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: fmt.Sprintf("d%d", i)})
			}
		}, "spec.domain.devices.disks", field.ErrorTypeTooMany, "spec.domain.devices.disks list exceeds the 256 element limit in length"},
	})
}

func TestValidateVMIMetadata(t *testing.T) {
	meta := &metav1.ObjectMeta{Labels: map[string]string{v1.NodeNameLabel: "node1", "app": "x"}}
	expectError(t, ValidateVMIMetadata(field.NewPath("metadata"), meta, false), "metadata.labels", field.ErrorTypeNotSupported,
		"creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited")
	if errs := ValidateVMIMetadata(field.NewPath("metadata"), meta, true); len(errs) > 0 {
		t.Errorf("privileged: %v", errs)
	}
	if errs := ValidateVMIMetadata(field.NewPath("metadata"), &metav1.ObjectMeta{Labels: map[string]string{"kubevirt.io/vm": "x"}}, false); len(errs) > 0 {
		t.Errorf("ordinary kubevirt.io label refused: %v", errs)
	}
}

func TestValidateVMIUpdate(t *testing.T) {
	priv := Privileges{Users: []string{"system:serviceaccount:kubevirt:kubevirt-controller"}, Groups: []string{"qvirt:components"}}
	alice := authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}
	controller := authenticationv1.UserInfo{Username: "system:serviceaccount:kubevirt:kubevirt-controller"}
	handler := authenticationv1.UserInfo{Username: "system:serviceaccount:kubevirt:qvirt-handler", Groups: []string{"qvirt:components"}}
	old := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"app": "a"}}, Spec: *baseSpec()}
	old.Status.Phase = v1.Running

	for _, tc := range []struct {
		name  string
		user  authenticationv1.UserInfo
		edit  func(n *v1.VirtualMachineInstance)
		field string // empty: allowed
		msg   string
	}{
		{"user edits a label", alice, func(n *v1.VirtualMachineInstance) { n.Labels["app"] = "b" }, "", ""},
		{"user edits the spec", alice, func(n *v1.VirtualMachineInstance) { n.Spec.Domain.CPU.Cores = 2 },
			"spec", "update of VMI object is restricted"},
		{"user sets a reserved label", alice, func(n *v1.VirtualMachineInstance) { n.Labels[v1.NodeNameLabel] = "n1" },
			"metadata.labels", "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited"},
		{"user edits the status", alice, func(n *v1.VirtualMachineInstance) { n.Status.Phase = v1.Failed },
			"status", "owned by qvirt"},
		{"controller edits the status", controller, func(n *v1.VirtualMachineInstance) { n.Status.Phase = v1.Failed }, "", ""},
		{"component group edits labels and spec", handler, func(n *v1.VirtualMachineInstance) {
			n.Labels[v1.NodeNameLabel] = "n1"
			n.Spec.TerminationGracePeriodSeconds = ptr(int64(0))
		}, "", ""},
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
