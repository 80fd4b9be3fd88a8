/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestAutoattachVSOCKNeedsItsFeatureGate(t *testing.T) {
	on := true
	runRuleCases(t, []ruleCase{
		{"without the gate", nil, func(s *v1.VirtualMachineInstanceSpec) { s.Domain.Devices.AutoattachVSOCK = &on },
			"spec.domain.devices.autoattachVSOCK", field.ErrorTypeInvalid, "VSOCK feature gate is not enabled in kubevirt-config"},
	})
	s := baseSpec()
	s.Domain.Devices.AutoattachVSOCK = &on
	if errs := ValidateVMISpec(field.NewPath("spec"), s, StaticConfig{FeatureGateVSOCK: true}); len(errs) > 0 {
		t.Errorf("with the gate: %v", errs)
	}
}
