/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group shared with KubeVirt.
const GroupName = "kubevirt.io"

var (
	// SchemeGroupVersion is kubevirt.io/v1.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// GroupVersionKinds of the served kinds, handy for owner references.
var (
	VirtualMachineGroupVersionKind                  = SchemeGroupVersion.WithKind("VirtualMachine")
	VirtualMachineInstanceGroupVersionKind          = SchemeGroupVersion.WithKind("VirtualMachineInstance")
	VirtualMachineInstanceMigrationGroupVersionKind = SchemeGroupVersion.WithKind("VirtualMachineInstanceMigration")
	KubeVirtGroupVersionKind                        = SchemeGroupVersion.WithKind("KubeVirt")
)

// Kind qualifies a kind name with this group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource qualifies a resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&VirtualMachine{},
		&VirtualMachineList{},
		&VirtualMachineInstance{},
		&VirtualMachineInstanceList{},
		&VirtualMachineInstanceMigration{},
		&VirtualMachineInstanceMigrationList{},
		&KubeVirt{},
		&KubeVirtList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
