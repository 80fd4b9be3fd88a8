/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// VirtualMachineInstance is a running (or about to run) virtual machine.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=virtualmachineinstances,singular=virtualmachineinstance,shortName=vmi;vmis,categories=all,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="IP",type="string",JSONPath=".status.interfaces[0].ipAddress"
// +kubebuilder:printcolumn:name="NodeName",type="string",JSONPath=".status.nodeName"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Live-Migratable",type="string",JSONPath=".status.conditions[?(@.type=='LiveMigratable')].status",priority=1
// +kubebuilder:printcolumn:name="Paused",type="string",JSONPath=".status.conditions[?(@.type=='Paused')].status",priority=1
type VirtualMachineInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachineInstanceSpec `json:"spec"`
	// +optional
	Status VirtualMachineInstanceStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceList is a list of VirtualMachineInstances.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstance `json:"items"`
}

// EvictionStrategy says what a node drain does to a VMI.
type EvictionStrategy string

const (
	EvictionStrategyNone                  EvictionStrategy = "None"
	EvictionStrategyLiveMigrate           EvictionStrategy = "LiveMigrate"
	EvictionStrategyLiveMigrateIfPossible EvictionStrategy = "LiveMigrateIfPossible"
	EvictionStrategyExternal              EvictionStrategy = "External"
)

// StartStrategy "Paused" starts the guest paused.
type StartStrategy string

const StartStrategyPaused StartStrategy = "Paused"

// DefaultGracePeriodSeconds applies when terminationGracePeriodSeconds is unset.
const DefaultGracePeriodSeconds int64 = 30

// VirtualMachineInstanceSpec describes a VMI.
type VirtualMachineInstanceSpec struct {
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Domain is the virtual hardware.
	Domain DomainSpec `json:"domain"`
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	EvictionStrategy *EvictionStrategy `json:"evictionStrategy,omitempty"`
	// +optional
	StartStrategy *StartStrategy `json:"startStrategy,omitempty"`
	// TerminationGracePeriodSeconds is how long an ACPI shutdown may take before
	// the guest is killed.
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Volumes []Volume `json:"volumes,omitempty"`
	// +optional
	LivenessProbe *Probe `json:"livenessProbe,omitempty"`
	// +optional
	ReadinessProbe *Probe `json:"readinessProbe,omitempty"`
	// +optional
	Hostname string `json:"hostname,omitempty"`
	// +optional
	Subdomain string `json:"subdomain,omitempty"`
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Networks []Network `json:"networks,omitempty"`
	// +optional
	DNSPolicy corev1.DNSPolicy `json:"dnsPolicy,omitempty"`
	// +optional
	DNSConfig *corev1.PodDNSConfig `json:"dnsConfig,omitempty"`
	// +optional
	Architecture string `json:"architecture,omitempty"`
	// AccessCredentials are SSH public keys and passwords to put into the guest.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +optional
	AccessCredentials []AccessCredential `json:"accessCredentials,omitempty"`
}

// Probe is a health check run against the guest.
type Probe struct {
	Handler `json:",inline"`
	// +optional
	InitialDelaySeconds int32 `json:"initialDelaySeconds,omitempty"`
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// +optional
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`
	// +optional
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	// +optional
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// Handler is the action of a probe; exactly one member is set.
type Handler struct {
	// Exec runs a command in the guest through the guest agent.
	// +optional
	Exec *corev1.ExecAction `json:"exec,omitempty"`
	// +optional
	GuestAgentPing *GuestAgentPing `json:"guestAgentPing,omitempty"`
	// +optional
	HTTPGet *corev1.HTTPGetAction `json:"httpGet,omitempty"`
	// +optional
	TCPSocket *corev1.TCPSocketAction `json:"tcpSocket,omitempty"`
}

// GuestAgentPing probes by pinging the guest agent.
type GuestAgentPing struct{}

// VirtualMachineInstancePhase is the lifecycle phase of a VMI.
type VirtualMachineInstancePhase string

const (
	VmPhaseUnset VirtualMachineInstancePhase = ""
	// Pending: accepted, no launcher pod yet.
	Pending VirtualMachineInstancePhase = "Pending"
	// Scheduling: the launcher pod exists but is not running.
	Scheduling VirtualMachineInstancePhase = "Scheduling"
	// Scheduled: the pod runs; the node agent takes over.
	Scheduled VirtualMachineInstancePhase = "Scheduled"
	Running   VirtualMachineInstancePhase = "Running"
	// Succeeded: the guest shut down by itself.
	Succeeded VirtualMachineInstancePhase = "Succeeded"
	Failed    VirtualMachineInstancePhase = "Failed"
	Unknown   VirtualMachineInstancePhase = "Unknown"
)

// VirtualMachineInstanceConditionType names a VMI condition.
type VirtualMachineInstanceConditionType string

const (
	VirtualMachineInstanceReady          VirtualMachineInstanceConditionType = "Ready"
	VirtualMachineInstanceIsMigratable   VirtualMachineInstanceConditionType = "LiveMigratable"
	VirtualMachineInstancePaused         VirtualMachineInstanceConditionType = "Paused"
	VirtualMachineInstanceAgentConnected VirtualMachineInstanceConditionType = "AgentConnected"
	// VirtualMachineInstanceAccessCredentialsSynchronized: the guest agent has applied the
	// VMI's qemuGuestAgent access credentials (False, with the reason in the message, otherwise).
	VirtualMachineInstanceAccessCredentialsSynchronized VirtualMachineInstanceConditionType = "AccessCredentialsSynchronized"
	// VirtualMachineInstancePodScheduled mirrors the launcher pod's PodScheduled.
	VirtualMachineInstancePodScheduled VirtualMachineInstanceConditionType = VirtualMachineInstanceConditionType(corev1.PodScheduled)
)

// Reasons of a False LiveMigratable condition, as KubeVirt writes them.
const (
	VirtualMachineInstanceReasonDisksNotMigratable     = "DisksNotLiveMigratable"
	VirtualMachineInstanceReasonInterfaceNotMigratable = "InterfaceNotLiveMigratable"
)

// VirtualMachineInstanceCondition is a condition of a VMI.
type VirtualMachineInstanceCondition struct {
	Type   VirtualMachineInstanceConditionType `json:"type"`
	Status corev1.ConditionStatus              `json:"status"`
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

// VirtualMachineInstancePhaseTransitionTimestamp records when a phase was entered.
type VirtualMachineInstancePhaseTransitionTimestamp struct {
	// +optional
	Phase VirtualMachineInstancePhase `json:"phase,omitempty"`
	// +nullable
	// +optional
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp,omitempty"`
}

// VirtualMachineInstanceStatus is owned by the system; users never write it.
type VirtualMachineInstanceStatus struct {
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Reason is a CamelCase word saying why the VMI is in its phase.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Conditions []VirtualMachineInstanceCondition `json:"conditions,omitempty"`
	// +optional
	Phase VirtualMachineInstancePhase `json:"phase,omitempty"`
	// +listType=atomic
	// +optional
	PhaseTransitionTimestamps []VirtualMachineInstancePhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`
	// Interfaces lists the guest's NICs; the IP column shows the first one.
	// +optional
	Interfaces []VirtualMachineInstanceNetworkInterface `json:"interfaces,omitempty"`
	// +optional
	GuestOSInfo VirtualMachineInstanceGuestOSInfo `json:"guestOSInfo,omitempty"`
	// +optional
	MigrationState *VirtualMachineInstanceMigrationState `json:"migrationState,omitempty"`
	// VSOCKCID is the guest's VSOCK context ID, unique in the cluster (autoattachVSOCK).
	// +optional
	VSOCKCID *uint32 `json:"VSOCKCID,omitempty"`
	// EvacuationNodeName is the node the VMI must leave: an eviction of its launcher pod there
	// was turned into an evacuation.
	// +optional
	EvacuationNodeName string `json:"evacuationNodeName,omitempty"`
	// +optional
	QOSClass *corev1.PodQOSClass `json:"qosClass,omitempty"`
	// ActivePods maps launcher pod UIDs to node names; two during a migration.
	// +optional
	ActivePods map[types.UID]string `json:"activePods,omitempty"`
	// +listType=atomic
	// +optional
	VolumeStatus []VolumeStatus `json:"volumeStatus,omitempty"`
	// Machine is the machine type QEMU actually runs, aliases resolved.
	// +optional
	Machine *Machine `json:"machine,omitempty"`
	// +optional
	CurrentCPUTopology *CPUTopology `json:"currentCPUTopology,omitempty"`
	// +optional
	Memory *MemoryStatus `json:"memory,omitempty"`
}

// VirtualMachineInstanceNetworkInterface is the observed state of one guest NIC.
type VirtualMachineInstanceNetworkInterface struct {
	// IP is always the first entry of IPs.
	// +optional
	IP string `json:"ipAddress,omitempty"`
	// +optional
	MAC string `json:"mac,omitempty"`
	// Name is the name of the network the interface is attached to.
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	IPs []string `json:"ipAddresses,omitempty"`
	// +optional
	PodInterfaceName string `json:"podInterfaceName,omitempty"`
	// InterfaceName is the name inside the guest.
	// +optional
	InterfaceName string `json:"interfaceName,omitempty"`
	// InfoSource says where the data came from: domain, guest-agent, multus-status.
	// +optional
	InfoSource string `json:"infoSource,omitempty"`
	// +optional
	QueueCount int32 `json:"queueCount,omitempty"`
	// +optional
	LinkState string `json:"linkState,omitempty"`
}

// VirtualMachineInstanceGuestOSInfo is what the guest agent reports about the OS.
type VirtualMachineInstanceGuestOSInfo struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	KernelRelease string `json:"kernelRelease,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	PrettyName string `json:"prettyName,omitempty"`
	// +optional
	VersionID string `json:"versionId,omitempty"`
	// +optional
	KernelVersion string `json:"kernelVersion,omitempty"`
	// +optional
	Machine string `json:"machine,omitempty"`
	// +optional
	ID string `json:"id,omitempty"`
}

// VolumePhase is the attach state of a volume.
type VolumePhase string

const (
	VolumePending VolumePhase = "Pending"
	VolumeBound   VolumePhase = "Bound"
	// HotplugVolumeAttachedToNode: the attachment pod holding the claim runs on the VMI's node.
	HotplugVolumeAttachedToNode VolumePhase = "AttachedToNode"
	// HotplugVolumeMounted: the node agent has handed the volume to the launcher.
	HotplugVolumeMounted VolumePhase = "MountedToPod"
	VolumeReady          VolumePhase = "Ready"
	// HotplugVolumeDetaching: the volume left the spec and its attachment pod is being removed.
	HotplugVolumeDetaching VolumePhase = "Detaching"
	// HotplugVolumeUnMounted: QEMU no longer uses the volume.
	HotplugVolumeUnMounted VolumePhase = "UnMountedFromPod"
	// MemoryDumpVolumeInProgress: the memoryDump volume is attached and the dump is being written.
	MemoryDumpVolumeInProgress VolumePhase = "MemoryDumpInProgress"
	MemoryDumpVolumeCompleted  VolumePhase = "MemoryDumpCompleted"
	MemoryDumpVolumeFailed     VolumePhase = "MemoryDumpFailed"
)

// VolumeStatus is the observed state of one volume.
type VolumeStatus struct {
	Name string `json:"name"`
	// Target is the guest device name, e.g. vda.
	Target string `json:"target"`
	// +optional
	Phase VolumePhase `json:"phase,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// Size in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// PersistentVolumeClaimInfo describes the claim behind a persistentVolumeClaim volume, as
	// virt-controller found it when it made the launcher pod.
	// +optional
	PersistentVolumeClaimInfo *PersistentVolumeClaimInfo `json:"persistentVolumeClaimInfo,omitempty"`
	// HotplugVolume is set for a volume attached to the running VMI.
	// +optional
	HotplugVolume *HotplugVolumeStatus `json:"hotplugVolume,omitempty"`
	// MemoryDumpVolume is set for a memoryDump volume: the dump written to it.
	// +optional
	MemoryDumpVolume *DomainMemoryDumpInfo `json:"memoryDumpVolume,omitempty"`
}

// HotplugVolumeStatus names the attachment pod that holds a hotplugged volume on the VMI's node.
type HotplugVolumeStatus struct {
	// +optional
	AttachPodName string `json:"attachPodName,omitempty"`
	// +optional
	AttachPodUID types.UID `json:"attachPodUID,omitempty"`
}

// DomainMemoryDumpInfo is one memory dump written into a memoryDump volume.
type DomainMemoryDumpInfo struct {
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`
	// +optional
	EndTimestamp *metav1.Time `json:"endTimestamp,omitempty"`
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// TargetFileName is the dump's file name in the claim.
	// +optional
	TargetFileName string `json:"targetFileName,omitempty"`
}

// PersistentVolumeClaimInfo is the state of a claim a VMI uses.
type PersistentVolumeClaimInfo struct {
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// +optional
	// +listType=atomic
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
	// +optional
	VolumeMode *corev1.PersistentVolumeMode `json:"volumeMode,omitempty"`
	// Capacity of the bound volume.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// Requests of the claim.
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// +optional
	Preallocated bool `json:"preallocated,omitempty"`
	// FilesystemOverhead is the share of a Filesystem volume kept free of the disk image
	// (a decimal fraction, e.g. "0.055").
	// +optional
	FilesystemOverhead *Percent `json:"filesystemOverhead,omitempty"`
}

// Percent is a decimal fraction between 0 and 1, as a string.
type Percent string

// CPUTopology is the vCPU layout in use.
type CPUTopology struct {
	// +optional
	Cores uint32 `json:"cores,omitempty"`
	// +optional
	Sockets uint32 `json:"sockets,omitempty"`
	// +optional
	Threads uint32 `json:"threads,omitempty"`
}

// MemoryStatus is the guest memory in use.
type MemoryStatus struct {
	// +optional
	GuestAtBoot *resource.Quantity `json:"guestAtBoot,omitempty"`
	// +optional
	GuestCurrent *resource.Quantity `json:"guestCurrent,omitempty"`
	// +optional
	GuestRequested *resource.Quantity `json:"guestRequested,omitempty"`
}
