/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

// Well-known labels, annotations and finalizers. The values are KubeVirt's: tools
// such as virtctl select objects by them.
const (
	// AppLabel marks objects belonging to KubeVirt; launcher pods carry it with
	// the value VirtLauncherAppLabelValue.
	AppLabel = "kubevirt.io"
	// VirtLauncherAppLabelValue is the AppLabel value of every launcher pod.
	VirtLauncherAppLabelValue = "virt-launcher"

	// CreatedByLabel on a launcher pod holds the UID of its VMI.
	CreatedByLabel = "kubevirt.io/created-by"
	// NodeNameLabel on a VMI names the node it runs on (CRDs lack field selectors).
	NodeNameLabel = "kubevirt.io/nodeName"
	// VirtualMachineLabel on a VMI (and its pod) names the owning VM.
	VirtualMachineLabel = AppLabel + "/vm"
	// DeprecatedVirtualMachineNameLabel is still set by KubeVirt on launcher pods and
	// used by services written for it.
	DeprecatedVirtualMachineNameLabel = "vm.kubevirt.io/name"
	// DomainAnnotation on a launcher pod names the VMI it hosts.
	DomainAnnotation = "kubevirt.io/domain"

	// MigrationSelectorLabel on a migration names its VMI; `virtctl migrate-cancel`
	// lists migrations by it.
	MigrationSelectorLabel = "kubevirt.io/vmi-name"
	// MigrationJobLabel on a migration target pod holds the migration's UID.
	MigrationJobLabel = "kubevirt.io/migrationJobUID"
	// MigrationTargetNodeNameLabel on a VMI names the node it migrates to.
	MigrationTargetNodeNameLabel = "kubevirt.io/migrationTargetNodeName"

	// VirtualMachineInstanceFinalizer keeps a VMI until its launcher is gone.
	VirtualMachineInstanceFinalizer = "kubevirt.io/foregroundDeleteVirtualMachine"
	// VirtualMachineControllerFinalizer is set on VMIs by the VM controller.
	VirtualMachineControllerFinalizer = "kubevirt.io/virtualMachineControllerFinalize"
	// VirtualMachineInstanceMigrationFinalizer keeps a migration until it is cleaned up.
	VirtualMachineInstanceMigrationFinalizer = "kubevirt.io/migrationJobFinalize"
)
