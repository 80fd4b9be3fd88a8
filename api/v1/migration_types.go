/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// VirtualMachineInstanceMigration asks for one live migration of a VMI; deleting
// it before it finishes cancels the migration.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachineinstancemigrations,singular=virtualmachineinstancemigration,shortName=vmim;vmims,categories=all,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase",description="The current phase of VM instance migration"
// +kubebuilder:printcolumn:name="VMI",type="string",JSONPath=".spec.vmiName",description="The name of the VMI to perform the migration on"
type VirtualMachineInstanceMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachineInstanceMigrationSpec `json:"spec"`
	// +optional
	Status VirtualMachineInstanceMigrationStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceMigrationList is a list of migrations.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstanceMigration `json:"items"`
}

// VirtualMachineInstanceMigrationSpec names the VMI to move.
type VirtualMachineInstanceMigrationSpec struct {
	// VMIName is a VMI in the migration's namespace. Optional in the schema, as in
	// KubeVirt, so that the webhook reports its absence.
	// +optional
	VMIName string `json:"vmiName,omitempty"`
	// AddedNodeSelector narrows the target nodes further; it can never widen the
	// VMI's own constraints.
	// +optional
	AddedNodeSelector map[string]string `json:"addedNodeSelector,omitempty"`
}

// VirtualMachineInstanceMigrationPhase is the lifecycle phase of a migration.
type VirtualMachineInstanceMigrationPhase string

const (
	MigrationPhaseUnset      VirtualMachineInstanceMigrationPhase = ""
	MigrationPending         VirtualMachineInstanceMigrationPhase = "Pending"
	MigrationScheduling      VirtualMachineInstanceMigrationPhase = "Scheduling"
	MigrationScheduled       VirtualMachineInstanceMigrationPhase = "Scheduled"
	MigrationPreparingTarget VirtualMachineInstanceMigrationPhase = "PreparingTarget"
	MigrationTargetReady     VirtualMachineInstanceMigrationPhase = "TargetReady"
	MigrationRunning         VirtualMachineInstanceMigrationPhase = "Running"
	MigrationSucceeded       VirtualMachineInstanceMigrationPhase = "Succeeded"
	MigrationFailed          VirtualMachineInstanceMigrationPhase = "Failed"
)

// VirtualMachineInstanceMigrationConditionType names a migration condition.
type VirtualMachineInstanceMigrationConditionType string

const (
	VirtualMachineInstanceMigrationAbortRequested VirtualMachineInstanceMigrationConditionType = "migrationAbortRequested"
)

// VirtualMachineInstanceMigrationCondition is a condition of a migration.
type VirtualMachineInstanceMigrationCondition struct {
	Type   VirtualMachineInstanceMigrationConditionType `json:"type"`
	Status corev1.ConditionStatus                       `json:"status"`
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

// VirtualMachineInstanceMigrationPhaseTransitionTimestamp records when a phase was entered.
type VirtualMachineInstanceMigrationPhaseTransitionTimestamp struct {
	// +optional
	Phase VirtualMachineInstanceMigrationPhase `json:"phase,omitempty"`
	// +nullable
	// +optional
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp,omitempty"`
}

// VirtualMachineInstanceMigrationStatus is owned by the system.
type VirtualMachineInstanceMigrationStatus struct {
	// +optional
	Phase VirtualMachineInstanceMigrationPhase `json:"phase,omitempty"`
	// +optional
	Conditions []VirtualMachineInstanceMigrationCondition `json:"conditions,omitempty"`
	// +listType=atomic
	// +optional
	PhaseTransitionTimestamps []VirtualMachineInstanceMigrationPhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`
	// +optional
	MigrationState *VirtualMachineInstanceMigrationState `json:"migrationState,omitempty"`
}

// MigrationAbortStatus is the outcome of a cancel request.
type MigrationAbortStatus string

const (
	MigrationAbortSucceeded  MigrationAbortStatus = "Succeeded"
	MigrationAbortFailed     MigrationAbortStatus = "Failed"
	MigrationAbortInProgress MigrationAbortStatus = "Aborting"
)

// MigrationMode is how memory is being moved.
type MigrationMode string

const (
	MigrationPreCopy  MigrationMode = "PreCopy"
	MigrationPostCopy MigrationMode = "PostCopy"
	MigrationPaused   MigrationMode = "Paused"
)

// VirtualMachineInstanceMigrationState is the progress of the VMI's current or
// last migration, kept both on the VMI and on the migration object.
type VirtualMachineInstanceMigrationState struct {
	// +nullable
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`
	// +nullable
	// +optional
	EndTimestamp *metav1.Time `json:"endTimestamp,omitempty"`
	// TargetNodeDomainReadyTimestamp is when the guest became active on the target.
	// +optional
	TargetNodeDomainReadyTimestamp *metav1.Time `json:"targetNodeDomainReadyTimestamp,omitempty"`
	// +optional
	TargetNodeDomainDetected bool `json:"targetNodeDomainDetected,omitempty"`
	// TargetNodeAddress is where the source sends the migration stream.
	// +optional
	TargetNodeAddress string `json:"targetNodeAddress,omitempty"`
	// TargetDirectMigrationNodePorts maps target ports to their use.
	// +optional
	TargetDirectMigrationNodePorts map[string]int `json:"targetDirectMigrationNodePorts,omitempty"`
	// +optional
	TargetNode string `json:"targetNode,omitempty"`
	// +optional
	TargetPod string `json:"targetPod,omitempty"`
	// +optional
	SourceNode string `json:"sourceNode,omitempty"`
	// +optional
	SourcePod string `json:"sourcePod,omitempty"`
	// +optional
	Completed bool `json:"completed,omitempty"`
	// +optional
	Failed bool `json:"failed,omitempty"`
	// +optional
	AbortRequested bool `json:"abortRequested,omitempty"`
	// +optional
	AbortStatus MigrationAbortStatus `json:"abortStatus,omitempty"`
	// +optional
	FailureReason string `json:"failureReason,omitempty"`
	// MigrationUID is the UID of the migration object; KubeVirt spells it migrationUid.
	// +optional
	MigrationUID types.UID `json:"migrationUid,omitempty"`
	// +optional
	Mode MigrationMode `json:"mode,omitempty"`
}
