/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

// Package v1 holds the kubevirt.io/v1 API types that qvirt serves: VirtualMachine,
// VirtualMachineInstance, VirtualMachineInstanceMigration and KubeVirt.
//
// JSON field names follow KubeVirt v1.9 exactly so that manifests and virtctl written
// for KubeVirt work unchanged. Only the supported subset of fields is modelled; the
// validating webhook refuses what we do not implement.
//
// +groupName=kubevirt.io
// +kubebuilder:object:generate=true
package v1
