/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// VirtualMachine keeps a VMI template and starts or stops VMIs from it according
// to its run strategy.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachines,singular=virtualmachine,shortName=vm;vms,categories=all,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Status",type="string",JSONPath=".status.printableStatus",description="Human Readable Status"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
type VirtualMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachineSpec `json:"spec"`
	// +optional
	Status VirtualMachineStatus `json:"status,omitempty"`
}

// VirtualMachineList is a list of VirtualMachines.
//
// +kubebuilder:object:root=true
type VirtualMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachine `json:"items"`
}

// VirtualMachineRunStrategy says when the VM should have a running VMI.
type VirtualMachineRunStrategy string

const (
	// RunStrategyUnknown is not a valid strategy; RunStrategy returns it with an error.
	RunStrategyUnknown        VirtualMachineRunStrategy = ""
	RunStrategyAlways         VirtualMachineRunStrategy = "Always"
	RunStrategyHalted         VirtualMachineRunStrategy = "Halted"
	RunStrategyManual         VirtualMachineRunStrategy = "Manual"
	RunStrategyRerunOnFailure VirtualMachineRunStrategy = "RerunOnFailure"
	RunStrategyOnce           VirtualMachineRunStrategy = "Once"
)

// VirtualMachineSpec describes a VM. Exactly one of running and runStrategy may be set.
type VirtualMachineSpec struct {
	// Running is the deprecated form of runStrategy: true is Always, false Halted.
	// +optional
	Running *bool `json:"running,omitempty"`
	// +optional
	RunStrategy *VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
	// +optional
	Instancetype *InstancetypeMatcher `json:"instancetype,omitempty"`
	// +optional
	Preference *PreferenceMatcher `json:"preference,omitempty"`
	// Template is the VMI to create.
	Template *VirtualMachineInstanceTemplateSpec `json:"template"`
	// DataVolumeTemplates are CDI DataVolumes created with the VM.
	// +optional
	DataVolumeTemplates []DataVolumeTemplateSpec `json:"dataVolumeTemplates,omitempty"`
}

// ErrRunningAndRunStrategy is returned for a VM that sets both running and runStrategy.
var ErrRunningAndRunStrategy = errors.New("running and runStrategy are mutually exclusive")

// RunStrategy folds the deprecated running flag into a run strategy; a VM with
// neither set is Halted.
func (vm *VirtualMachine) RunStrategy() (VirtualMachineRunStrategy, error) {
	switch {
	case vm.Spec.Running != nil && vm.Spec.RunStrategy != nil:
		return RunStrategyUnknown, ErrRunningAndRunStrategy
	case vm.Spec.RunStrategy != nil:
		return *vm.Spec.RunStrategy, nil
	case vm.Spec.Running != nil && *vm.Spec.Running:
		return RunStrategyAlways, nil
	default:
		return RunStrategyHalted, nil
	}
}

// VirtualMachineInstanceTemplateSpec is the VMI a VM creates.
type VirtualMachineInstanceTemplateSpec struct {
	// ObjectMeta is copied to the VMI.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +nullable
	// +optional
	ObjectMeta metav1.ObjectMeta `json:"metadata,omitempty"` // a nested ObjectMeta has no schema: without preserving, labels would be pruned
	// +optional
	Spec VirtualMachineInstanceSpec `json:"spec,omitempty"`
}

// DataVolumeTemplateSpec is a CDI DataVolume created with the VM. CDI owns the
// schema of its spec, so it is kept as opaque JSON here.
type DataVolumeTemplateSpec struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +kubebuilder:pruning:PreserveUnknownFields
	// +nullable
	// +optional
	ObjectMeta metav1.ObjectMeta `json:"metadata,omitempty"`
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Spec runtime.RawExtension `json:"spec"`
	// Status exists only for compatibility with older KubeVirt manifests.
	// +nullable
	// +optional
	Status *DataVolumeTemplateDummyStatus `json:"status,omitempty"`
}

// DataVolumeTemplateDummyStatus is always empty.
type DataVolumeTemplateDummyStatus struct{}

// InstancetypeMatcher refers to a (Cluster)Instancetype that fills the template.
type InstancetypeMatcher struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	RevisionName string `json:"revisionName,omitempty"`
	// +optional
	InferFromVolume string `json:"inferFromVolume,omitempty"`
	// +optional
	InferFromVolumeFailurePolicy *string `json:"inferFromVolumeFailurePolicy,omitempty"`
}

// PreferenceMatcher refers to a (Cluster)Preference that fills the template.
type PreferenceMatcher struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	RevisionName string `json:"revisionName,omitempty"`
	// +optional
	InferFromVolume string `json:"inferFromVolume,omitempty"`
	// +optional
	InferFromVolumeFailurePolicy *string `json:"inferFromVolumeFailurePolicy,omitempty"`
}

// VirtualMachinePrintableStatus is the one-word state shown by kubectl.
type VirtualMachinePrintableStatus string

// Printable statuses; the first that applies wins, in the order Terminating,
// Stopping, Migrating, Paused, Running, ErrorUnschedulable, ErrImagePull,
// ImagePullBackOff, Starting, CrashLoopBackOff, Stopped, else Unknown.
const (
	VirtualMachineStatusStopped          VirtualMachinePrintableStatus = "Stopped"
	VirtualMachineStatusProvisioning     VirtualMachinePrintableStatus = "Provisioning"
	VirtualMachineStatusStarting         VirtualMachinePrintableStatus = "Starting"
	VirtualMachineStatusRunning          VirtualMachinePrintableStatus = "Running"
	VirtualMachineStatusPaused           VirtualMachinePrintableStatus = "Paused"
	VirtualMachineStatusStopping         VirtualMachinePrintableStatus = "Stopping"
	VirtualMachineStatusTerminating      VirtualMachinePrintableStatus = "Terminating"
	VirtualMachineStatusCrashLoopBackOff VirtualMachinePrintableStatus = "CrashLoopBackOff"
	VirtualMachineStatusMigrating        VirtualMachinePrintableStatus = "Migrating"
	VirtualMachineStatusUnknown          VirtualMachinePrintableStatus = "Unknown"
	VirtualMachineStatusUnschedulable    VirtualMachinePrintableStatus = "ErrorUnschedulable"
	VirtualMachineStatusErrImagePull     VirtualMachinePrintableStatus = "ErrImagePull"
	VirtualMachineStatusImagePullBackOff VirtualMachinePrintableStatus = "ImagePullBackOff"
)

// VirtualMachineConditionType names a VM condition.
type VirtualMachineConditionType string

const (
	VirtualMachineReady           VirtualMachineConditionType = "Ready"
	VirtualMachineFailure         VirtualMachineConditionType = "Failure"
	VirtualMachinePaused          VirtualMachineConditionType = "Paused"
	VirtualMachineRestartRequired VirtualMachineConditionType = "RestartRequired"
)

// VirtualMachineCondition is a condition of a VM.
type VirtualMachineCondition struct {
	Type   VirtualMachineConditionType `json:"type"`
	Status corev1.ConditionStatus      `json:"status"`
	// +nullable
	// +optional
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +nullable
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// StateChangeRequestAction is a queued start or stop.
type StateChangeRequestAction string

const (
	StartRequest StateChangeRequestAction = "Start"
	StopRequest  StateChangeRequestAction = "Stop"
)

// Keys of VirtualMachineStateChangeRequest.Data.
const (
	StartRequestDataPausedKey  = "paused"
	StartRequestDataPausedTrue = "true"
)

// VirtualMachineStateChangeRequest is an action the VM controller still has to
// carry out; restart is a Stop followed by a Start.
type VirtualMachineStateChangeRequest struct {
	Action StateChangeRequestAction `json:"action"`
	// +optional
	Data map[string]string `json:"data,omitempty"`
	// UID is the VMI a Stop applies to.
	// +optional
	UID *types.UID `json:"uid,omitempty"`
}

// VirtualMachineStartFailure counts consecutive failed starts for the
// CrashLoopBackOff backoff.
type VirtualMachineStartFailure struct {
	// +optional
	ConsecutiveFailCount int `json:"consecutiveFailCount,omitempty"`
	// +optional
	LastFailedVMIUID types.UID `json:"lastFailedVMIUID,omitempty"`
	// +optional
	RetryAfterTimestamp *metav1.Time `json:"retryAfterTimestamp,omitempty"`
}

// VirtualMachineStatus is owned by the system.
type VirtualMachineStatus struct {
	// Created is true while a VMI exists.
	// +optional
	Created bool `json:"created,omitempty"`
	// Ready is true while the VMI is ready.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// +optional
	PrintableStatus VirtualMachinePrintableStatus `json:"printableStatus,omitempty"`
	// +optional
	Conditions []VirtualMachineCondition `json:"conditions,omitempty"`
	// +optional
	StateChangeRequests []VirtualMachineStateChangeRequest `json:"stateChangeRequests,omitempty"`
	// +nullable
	// +optional
	StartFailure *VirtualMachineStartFailure `json:"startFailure,omitempty"`
	// ObservedGeneration is the VM generation the running VMI was made from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	DesiredGeneration int64 `json:"desiredGeneration,omitempty"`
	// RunStrategy is the last strategy acted on; RerunOnFailure needs it.
	// +optional
	RunStrategy VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
	// VolumeRequests are volumes to add to or remove from the VM's template and its running
	// VMI, as addvolume and removevolume on the VM asked.
	// +optional
	// +listType=atomic
	VolumeRequests []VirtualMachineVolumeRequest `json:"volumeRequests,omitempty"`
	// MemoryDumpRequest is the state of the last memorydump or removememorydump.
	// +optional
	// +nullable
	MemoryDumpRequest *VirtualMachineMemoryDumpRequest `json:"memoryDumpRequest,omitempty"`
}

// VirtualMachineVolumeRequest is one pending hotplug change; exactly one member is set.
type VirtualMachineVolumeRequest struct {
	// +optional
	AddVolumeOptions *AddVolumeOptions `json:"addVolumeOptions,omitempty"`
	// +optional
	RemoveVolumeOptions *RemoveVolumeOptions `json:"removeVolumeOptions,omitempty"`
}

// AddVolumeOptions is the body of addvolume: the volume, and the disk that shows it to the guest.
type AddVolumeOptions struct {
	Name         string               `json:"name"`
	Disk         *Disk                `json:"disk"`
	VolumeSource *HotplugVolumeSource `json:"volumeSource"`
	// +optional
	// +listType=atomic
	DryRun []string `json:"dryRun,omitempty"`
}

// RemoveVolumeOptions is the body of removevolume.
type RemoveVolumeOptions struct {
	Name string `json:"name"`
	// +optional
	// +listType=atomic
	DryRun []string `json:"dryRun,omitempty"`
}

// MemoryDumpPhase is where a memory dump request stands.
type MemoryDumpPhase string

const (
	// MemoryDumpAssociating: the claim is being added to the VM as a memoryDump volume.
	MemoryDumpAssociating MemoryDumpPhase = "Associating"
	// MemoryDumpInProgress: the claim is attached and QEMU writes the dump.
	MemoryDumpInProgress MemoryDumpPhase = "InProgress"
	// MemoryDumpUnmounting: the dump is written; the claim is being detached.
	MemoryDumpUnmounting MemoryDumpPhase = "Unmounting"
	MemoryDumpCompleted  MemoryDumpPhase = "Completed"
	// MemoryDumpDissociating: removememorydump takes the claim off the VM.
	MemoryDumpDissociating MemoryDumpPhase = "Dissociating"
	MemoryDumpFailed       MemoryDumpPhase = "Failed"
)

// VirtualMachineMemoryDumpRequest is the body of memorydump, and the VM's record of the dump.
type VirtualMachineMemoryDumpRequest struct {
	ClaimName string `json:"claimName"`
	// +optional
	Phase MemoryDumpPhase `json:"phase"`
	// Remove asks for the claim to be taken off the VM (removememorydump).
	// +optional
	Remove bool `json:"remove,omitempty"`
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`
	// +optional
	EndTimestamp *metav1.Time `json:"endTimestamp,omitempty"`
	// FileName is the dump's file in the claim.
	// +optional
	FileName *string `json:"fileName,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}
