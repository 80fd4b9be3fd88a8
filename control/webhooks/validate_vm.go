/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

var validRunStrategies = []v1.VirtualMachineRunStrategy{
	v1.RunStrategyHalted, v1.RunStrategyManual, v1.RunStrategyAlways, v1.RunStrategyRerunOnFailure, v1.RunStrategyOnce,
}

// ValidateVMSpec checks a VM spec. Like KubeVirt it validates the template as the
// VMI it will become: a copy of it gets the VMI spec defaults first.
func ValidateVMSpec(path *field.Path, spec *v1.VirtualMachineSpec, cfg Config) field.ErrorList {
	var errs field.ErrorList
	if spec.Template == nil {
		return append(errs, required(path.Child("template"), "missing virtual machine template."))
	}
	tmpl := spec.Template.Spec.DeepCopy()
	SetVMISpecDefaults(tmpl, cfg)
	errs = append(errs, ValidateVMISpec(path.Child("template", "spec"), tmpl, cfg)...)
	errs = append(errs, validateRunStrategy(path, spec)...)
	if spec.Instancetype != nil {
		errs = append(errs, unsupported(path.Child("instancetype"), "instancetypes"))
	}
	if spec.Preference != nil {
		errs = append(errs, unsupported(path.Child("preference"), "preferences"))
	}
	if len(spec.DataVolumeTemplates) > 0 {
		errs = append(errs, unsupported(path.Child("dataVolumeTemplates"), "dataVolumeTemplates (CDI)"))
	}
	return errs
}

func validateRunStrategy(path *field.Path, spec *v1.VirtualMachineSpec) field.ErrorList {
	var errs field.ErrorList
	switch {
	case spec.Running != nil && spec.RunStrategy != nil:
		errs = append(errs, invalid(path.Child("running"), *spec.Running,
			"Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead"))
	case spec.Running == nil && spec.RunStrategy == nil:
		errs = append(errs, invalid(path.Child("running"), nil, "RunStrategy must be specified"))
	}
	if rs := spec.RunStrategy; rs != nil {
		valid := false
		for _, s := range validRunStrategies {
			valid = valid || *rs == s
		}
		if !valid {
			errs = append(errs, invalid(path.Child("runStrategy"), *rs, "Invalid RunStrategy (%s)", *rs))
		}
	}
	return errs
}

// ValidateVMUpdate holds what only an update can break: the status of a VM is
// written by qvirt's components (start/stop requests included), never by users.
func ValidateVMUpdate(old, new *v1.VirtualMachine, user authenticationv1.UserInfo, priv Privileges) field.ErrorList {
	if priv.Allows(user) || equality.Semantic.DeepEqual(old.Status, new.Status) {
		return nil
	}
	return field.ErrorList{statusForbidden("VirtualMachine")}
}
