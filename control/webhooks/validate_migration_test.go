/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestValidateMigration(t *testing.T) {
	p := field.NewPath("spec")
	ok := &v1.VirtualMachineInstanceMigrationSpec{VMIName: "vmi-fedora", AddedNodeSelector: map[string]string{"topology.kubernetes.io/zone": "b"}}
	if errs := ValidateMigration(p, ok); len(errs) > 0 {
		t.Errorf("refused: %v", errs)
	}
	expectError(t, ValidateMigration(p, &v1.VirtualMachineInstanceMigrationSpec{}), "spec.vmiName", field.ErrorTypeRequired, "vmiName is missing")
	expectError(t, ValidateMigration(p, &v1.VirtualMachineInstanceMigrationSpec{VMIName: "Not_A_Name"}), "spec.vmiName", field.ErrorTypeInvalid, "RFC 1123")
	expectError(t, ValidateMigration(p, &v1.VirtualMachineInstanceMigrationSpec{VMIName: "x", AddedNodeSelector: map[string]string{"bad key!": "v"}}),
		"spec.addedNodeSelector[bad key!]", field.ErrorTypeInvalid, "invalid label key")
	expectError(t, ValidateMigration(p, &v1.VirtualMachineInstanceMigrationSpec{VMIName: "x", AddedNodeSelector: map[string]string{"k": "bad value!"}}),
		"spec.addedNodeSelector[k]", field.ErrorTypeInvalid, "invalid label value")
}

func TestValidateMigrationUpdate(t *testing.T) {
	priv := DefaultPrivileges()
	alice := authenticationv1.UserInfo{Username: "alice"}
	controller := authenticationv1.UserInfo{Username: "system:serviceaccount:kubevirt:kubevirt-controller"}
	old := &v1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1.MigrationSelectorLabel: "vmi1"}},
		Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: "vmi1"},
	}
	for _, tc := range []struct {
		name  string
		user  authenticationv1.UserInfo
		edit  func(m *v1.VirtualMachineInstanceMigration)
		field string
		msg   string
	}{
		{"spec change", controller, func(m *v1.VirtualMachineInstanceMigration) { m.Spec.VMIName = "vmi2" },
			"spec", "update of Migration object's spec is restricted"},
		{"label removed in flight", controller, func(m *v1.VirtualMachineInstanceMigration) { m.Labels = nil },
			"metadata.labels[kubevirt.io/vmi-name]", "selector label can't be modified on an in-flight migration"},
		{"label removed when done", controller, func(m *v1.VirtualMachineInstanceMigration) {
			m.Labels = nil
			m.Status.Phase = v1.MigrationSucceeded
		}, "", ""},
		{"user writes status", alice, func(m *v1.VirtualMachineInstanceMigration) { m.Status.Phase = v1.MigrationFailed },
			"status", "owned by qvirt"},
		{"user adds a label", alice, func(m *v1.VirtualMachineInstanceMigration) { m.Labels["team"] = "a" }, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := old.DeepCopy()
			tc.edit(n)
			errs := ValidateMigrationUpdate(old, n, tc.user, priv)
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
