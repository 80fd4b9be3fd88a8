/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"maps"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// ValidateMigration checks a migration being created. Whether the VMI exists and
// can migrate is the migration controller's business, which reports it in status.
func ValidateMigration(path *field.Path, spec *v1.VirtualMachineInstanceMigrationSpec) field.ErrorList {
	var errs field.ErrorList
	np := path.Child("vmiName")
	if spec.VMIName == "" {
		return append(errs, required(np, "vmiName is missing"))
	}
	for _, msg := range k8svalidation.IsDNS1123Subdomain(spec.VMIName) {
		errs = append(errs, invalid(np, spec.VMIName, "%s '%s': %s", np, spec.VMIName, msg))
	}
	sp := path.Child("addedNodeSelector")
	for _, k := range slices.Sorted(maps.Keys(spec.AddedNodeSelector)) {
		for _, msg := range k8svalidation.IsQualifiedName(k) {
			errs = append(errs, invalid(sp.Key(k), k, "%s: invalid label key: %s", sp.Key(k), msg))
		}
		for _, msg := range k8svalidation.IsValidLabelValue(spec.AddedNodeSelector[k]) {
			errs = append(errs, invalid(sp.Key(k), spec.AddedNodeSelector[k], "%s: invalid label value: %s", sp.Key(k), msg))
		}
	}
	return errs
}

// ValidateMigrationUpdate keeps the spec as created and, while the migration is
// in flight, the label virtctl finds it by. Status belongs to qvirt's components.
func ValidateMigrationUpdate(old, new *v1.VirtualMachineInstanceMigration, user authenticationv1.UserInfo, priv Privileges) field.ErrorList {
	var errs field.ErrorList
	if !equality.Semantic.DeepEqual(old.Spec, new.Spec) {
		errs = append(errs, notSupported(field.NewPath("spec"), nil, "update of Migration object's spec is restricted"))
	}
	final := new.Status.Phase == v1.MigrationSucceeded || new.Status.Phase == v1.MigrationFailed
	oldLabel, had := old.Labels[v1.MigrationSelectorLabel]
	if newLabel, has := new.Labels[v1.MigrationSelectorLabel]; !final && had && (!has || newLabel != oldLabel) {
		lp := field.NewPath("metadata", "labels").Key(v1.MigrationSelectorLabel)
		errs = append(errs, notSupported(lp, newLabel, "selector label can't be modified on an in-flight migration"))
	}
	if !priv.Allows(user) && !equality.Semantic.DeepEqual(old.Status, new.Status) {
		errs = append(errs, statusForbidden("VirtualMachineInstanceMigration"))
	}
	return errs
}
