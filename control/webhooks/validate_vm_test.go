/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// baseVMSpec has a template as a user writes it: no defaults, no disks for the
// volumes.
func baseVMSpec() *v1.VirtualMachineSpec {
	always := v1.RunStrategyAlways
	return &v1.VirtualMachineSpec{
		RunStrategy: &always,
		Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Resources: v1.ResourceRequirements{Requests: quantities("memory", "64Mi")}},
			Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{
				ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/kubevirt/cirros-container-disk-demo"}}}},
		}},
	}
}

func TestValidateVMSpec(t *testing.T) {
	if errs := ValidateVMSpec(field.NewPath("spec"), baseVMSpec(), StaticConfig{}); len(errs) > 0 {
		t.Fatalf("the base VM is invalid: %v", errs)
	}
	for _, rs := range []v1.VirtualMachineRunStrategy{"Always", "Halted", "Manual", "RerunOnFailure", "Once"} {
		s := baseVMSpec()
		s.RunStrategy = &rs
		if errs := ValidateVMSpec(field.NewPath("spec"), s, StaticConfig{}); len(errs) > 0 {
			t.Errorf("runStrategy %s refused: %v", rs, errs)
		}
	}
	s := baseVMSpec()
	s.RunStrategy, s.Running = nil, ptr(false)
	if errs := ValidateVMSpec(field.NewPath("spec"), s, StaticConfig{}); len(errs) > 0 {
		t.Errorf("running: false refused: %v", errs)
	}

	for _, tc := range []struct {
		name       string
		edit       func(s *v1.VirtualMachineSpec)
		field, msg string
		typ        field.ErrorType
	}{
		{"running and runStrategy", func(s *v1.VirtualMachineSpec) { s.Running = ptr(true) },
			"spec.running", "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead", field.ErrorTypeInvalid},
		{"neither", func(s *v1.VirtualMachineSpec) { s.RunStrategy = nil },
			"spec.running", "RunStrategy must be specified", field.ErrorTypeInvalid},
		{"unknown strategy", func(s *v1.VirtualMachineSpec) { rs := v1.VirtualMachineRunStrategy("Sometimes"); s.RunStrategy = &rs },
			"spec.runStrategy", "Invalid RunStrategy (Sometimes)", field.ErrorTypeInvalid},
		{"no template", func(s *v1.VirtualMachineSpec) { s.Template = nil },
			"spec.template", "missing virtual machine template.", field.ErrorTypeRequired},
		{"template checked as a VMI", func(s *v1.VirtualMachineSpec) {
			s.Template.Spec.Domain.Devices.Disks = []v1.Disk{disk("nosuchvolume", v1.DiskBusVirtio)}
		}, "spec.template.spec.domain.devices.disks[0].name", "spec.template.spec.domain.devices.disks[0].Name 'nosuchvolume' not found.", field.ErrorTypeInvalid},
		{"template without memory", func(s *v1.VirtualMachineSpec) { s.Template.Spec.Domain.Resources.Requests = nil },
			"spec.template.spec.domain.resources.requests.memory", "no memory requested", field.ErrorTypeRequired},
		{"instancetype", func(s *v1.VirtualMachineSpec) { s.Instancetype = &v1.InstancetypeMatcher{Name: "u1.medium"} },
			"spec.instancetype", "qvirt does not support instancetypes", field.ErrorTypeNotSupported},
		{"preference", func(s *v1.VirtualMachineSpec) { s.Preference = &v1.PreferenceMatcher{Name: "fedora"} },
			"spec.preference", "qvirt does not support preferences", field.ErrorTypeNotSupported},
		{"dataVolumeTemplates", func(s *v1.VirtualMachineSpec) {
			s.DataVolumeTemplates = []v1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: "dv"}, Spec: runtime.RawExtension{Raw: []byte(`{}`)}}}
		}, "spec.dataVolumeTemplates", "qvirt does not support dataVolumeTemplates", field.ErrorTypeNotSupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseVMSpec()
			tc.edit(s)
			expectError(t, ValidateVMSpec(field.NewPath("spec"), s, StaticConfig{}), tc.field, tc.typ, tc.msg)
		})
	}
}

func TestValidateVMSpecLeavesTheTemplateAlone(t *testing.T) {
	s := baseVMSpec()
	ValidateVMSpec(field.NewPath("spec"), s, StaticConfig{})
	if s.Template.Spec.Domain.CPU != nil || len(s.Template.Spec.Domain.Devices.Disks) != 0 {
		t.Errorf("validation defaulted the stored template: %+v", s.Template.Spec)
	}
}

func TestValidateVMUpdate(t *testing.T) {
	priv := DefaultPrivileges()
	old := &v1.VirtualMachine{Spec: *baseVMSpec()}
	changed := old.DeepCopy()
	changed.Status.StateChangeRequests = []v1.VirtualMachineStateChangeRequest{{Action: v1.StartRequest}}

	alice := authenticationv1.UserInfo{Username: "alice"}
	expectError(t, ValidateVMUpdate(old, changed, alice, priv), "status", field.ErrorTypeForbidden, "owned by qvirt")
	api := authenticationv1.UserInfo{Username: "system:serviceaccount:kubevirt:kubevirt-apiserver"}
	if errs := ValidateVMUpdate(old, changed, api, priv); len(errs) > 0 {
		t.Errorf("virt-api refused: %v", errs)
	}
	specOnly := old.DeepCopy()
	specOnly.Spec.RunStrategy = ptr(v1.RunStrategyHalted)
	if errs := ValidateVMUpdate(old, specOnly, alice, priv); len(errs) > 0 {
		t.Errorf("a spec change refused: %v", errs)
	}
}
