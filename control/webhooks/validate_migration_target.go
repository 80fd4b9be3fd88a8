/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// MigrationLookup reads what a new migration is checked against: its VMI and the other
// migrations of its namespace.
type MigrationLookup interface {
	// VMI returns the named VMI, or nil when it does not exist.
	VMI(ctx context.Context, namespace, name string) (*v1.VirtualMachineInstance, error)
	Migrations(ctx context.Context, namespace string) ([]v1.VirtualMachineInstanceMigration, error)
}

// ValidateMigrationTarget refuses, as KubeVirt's webhook does, a migration of a VMI that does
// not exist, is not running, cannot migrate (its LiveMigratable condition says why) or is
// already being migrated; a migration accepted here would otherwise hold a target pod for
// nothing.
func ValidateMigrationTarget(mig *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance, others []v1.VirtualMachineInstanceMigration) field.ErrorList {
	p := field.NewPath("spec", "vmiName")
	name := mig.Namespace + "/" + mig.Spec.VMIName
	switch {
	case vmi == nil:
		return field.ErrorList{invalid(p, mig.Spec.VMIName, "the VMI %q does not exist", name)}
	case vmi.DeletionTimestamp != nil || vmi.Status.Phase == v1.Succeeded || vmi.Status.Phase == v1.Failed:
		return field.ErrorList{forbidden(p, "Cannot migrate VMI in finalized state.")}
	case vmi.Status.Phase != v1.Running:
		return field.ErrorList{forbidden(p, "Cannot migrate VMI %q: it is not running (phase %q)", name, vmi.Status.Phase)}
	}
	for i := range others {
		o := &others[i]
		if o.Spec.VMIName != mig.Spec.VMIName || o.Name == mig.Name && o.Name != "" || o.DeletionTimestamp != nil {
			continue
		}
		if o.Status.Phase != v1.MigrationSucceeded && o.Status.Phase != v1.MigrationFailed {
			return field.ErrorList{forbidden(p, "in-flight migration detected. Active migration job (%s) is currently already in progress for VMI %s.", o.Name, mig.Spec.VMIName)}
		}
	}
	if ms := vmi.Status.MigrationState; ms != nil && !ms.Completed && !ms.Failed && ms.MigrationUID != "" {
		return field.ErrorList{forbidden(p, "in-flight migration detected. Active migration job (%s) is currently already in progress for VMI %s.", ms.MigrationUID, mig.Spec.VMIName)}
	}
	for _, c := range vmi.Status.Conditions {
		if c.Type == v1.VirtualMachineInstanceIsMigratable {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return field.ErrorList{forbidden(p, "Cannot migrate VMI, Reason: %s, Message: %s", c.Reason, c.Message)}
		}
	}
	return field.ErrorList{forbidden(p, "Cannot migrate VMI %q: its node agent has not reported whether it can migrate", name)}
}

// lookupMigrationTarget reads the VMI and migrations for ValidateMigrationTarget.
func lookupMigrationTarget(ctx context.Context, l MigrationLookup, mig *v1.VirtualMachineInstanceMigration) (*v1.VirtualMachineInstance, []v1.VirtualMachineInstanceMigration, error) {
	vmi, err := l.VMI(ctx, mig.Namespace, mig.Spec.VMIName)
	if err != nil {
		return nil, nil, fmt.Errorf("reading VMI %s/%s: %w", mig.Namespace, mig.Spec.VMIName, err)
	}
	if vmi == nil {
		return nil, nil, nil
	}
	others, err := l.Migrations(ctx, mig.Namespace)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the migrations of %s: %w", mig.Namespace, err)
	}
	return vmi, others, nil
}
