/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

// Package webhooks is virt-api's admission for VirtualMachineInstance,
// VirtualMachine and VirtualMachineInstanceMigration.
//
// The rules are pure functions: the Set*Defaults functions mutate a typed object
// the way KubeVirt's mutating webhook does, and the Validate* functions return a
// field.ErrorList whose paths and messages follow KubeVirt's validating webhook.
// Anything the API accepts but qvirt cannot run is refused with
// "qvirt does not support ..." at its field path, never accepted and ignored.
// admission.go adapts them to AdmissionReview v1 over HTTP.
package webhooks
