/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeVirt is the cluster-wide installation and its configuration; the API server
// and the controllers read spec.configuration from it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kubevirts,singular=kubevirt,shortName=kv;kvs,categories=all,scope=Namespaced
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
type KubeVirt struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec KubeVirtSpec `json:"spec"`
	// +optional
	Status KubeVirtStatus `json:"status,omitempty"`
}

// KubeVirtList is a list of KubeVirts.
//
// +kubebuilder:object:root=true
type KubeVirtList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeVirt `json:"items"`
}

// KubeVirtSpec holds the installation settings and the configuration. virt-operator installs
// the components from imageRegistry and imageTag (default: its own image's), and uninstalls
// them by uninstallStrategy.
type KubeVirtSpec struct {
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`
	// +optional
	ImageTag string `json:"imageTag,omitempty"`
	// +optional
	ImageRegistry string `json:"imageRegistry,omitempty"`
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// +optional
	WorkloadUpdateStrategy KubeVirtWorkloadUpdateStrategy `json:"workloadUpdateStrategy,omitempty"`
	// UninstallStrategy: BlockUninstallIfWorkloadsExist (the default) refuses deleting the CR
	// while VMs or VMIs exist; RemoveWorkloads deletes them first.
	// +kubebuilder:validation:Enum=RemoveWorkloads;BlockUninstallIfWorkloadsExist
	// +optional
	UninstallStrategy KubeVirtUninstallStrategy `json:"uninstallStrategy,omitempty"`
	// +optional
	CertificateRotationStrategy KubeVirtCertificateRotateStrategy `json:"certificateRotateStrategy,omitempty"`
	// +optional
	Configuration KubeVirtConfiguration `json:"configuration,omitempty"`
	// CustomizeComponents patches installed components; the released KubeVirt
	// CR carries an empty one.
	// +optional
	CustomizeComponents CustomizeComponents `json:"customizeComponents,omitempty"`
}

// KubeVirtWorkloadUpdateStrategy says how running VMIs are moved to new launchers
// after an upgrade.
//
// +kubebuilder:validation:XValidation:rule="(!has(self.workloadUpdateMethods) || size(self.workloadUpdateMethods) == 0) && !has(self.batchEvictionSize) && !has(self.batchEvictionInterval)",message="qvirt does not support workload updates: running VMs keep the launcher they started with"
type KubeVirtWorkloadUpdateStrategy struct {
	// WorkloadUpdateMethods are LiveMigrate and/or Evict.
	// +listType=atomic
	// +optional
	WorkloadUpdateMethods []string `json:"workloadUpdateMethods,omitempty"`
	// +optional
	BatchEvictionSize *int `json:"batchEvictionSize,omitempty"`
	// +optional
	BatchEvictionInterval *metav1.Duration `json:"batchEvictionInterval,omitempty"`
}

// KubeVirtUninstallStrategy says whether uninstalling waits for workloads to go.
type KubeVirtUninstallStrategy string

const (
	KubeVirtUninstallStrategyRemoveWorkloads                KubeVirtUninstallStrategy = "RemoveWorkloads"
	KubeVirtUninstallStrategyBlockUninstallIfWorkloadsExist KubeVirtUninstallStrategy = "BlockUninstallIfWorkloadsExist"
)

// KubeVirtCertificateRotateStrategy configures the internal certificates.
type KubeVirtCertificateRotateStrategy struct {
	// +optional
	SelfSigned *KubeVirtSelfSignConfiguration `json:"selfSigned,omitempty"`
}

// KubeVirtSelfSignConfiguration sets lifetimes of the self-signed CA and the
// certificates it signs (defaults: CA 7 days, servers 24 h, renewed when 20% of
// the lifetime is left).
//
// +kubebuilder:validation:XValidation:rule="!has(self.ca) || !has(self.server) || !has(self.ca.duration) || !has(self.server.duration) || duration(self.server.duration) <= duration(self.ca.duration)",fieldPath=".server.duration",message="must not be longer than ca.duration: a server certificate would outlive the CA that signed it"
type KubeVirtSelfSignConfiguration struct {
	// Deprecated: use ca.duration.
	// +optional
	CARotateInterval *metav1.Duration `json:"caRotateInterval,omitempty"`
	// Deprecated: use server.duration.
	// +optional
	CertRotateInterval *metav1.Duration `json:"certRotateInterval,omitempty"`
	// Deprecated: use ca.renewBefore.
	// +optional
	CAOverlapInterval *metav1.Duration `json:"caOverlapInterval,omitempty"`
	// +optional
	CA *CertConfig `json:"ca,omitempty"`
	// +optional
	Server *CertConfig `json:"server,omitempty"`
}

// CertConfig is a certificate lifetime and how long before expiry to renew it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.duration) || duration(self.duration) > duration('0s')",fieldPath=".duration",message="must be positive"
// +kubebuilder:validation:XValidation:rule="!has(self.duration) || !has(self.renewBefore) || (duration(self.renewBefore) > duration('0s') && duration(self.renewBefore) < duration(self.duration))",fieldPath=".renewBefore",message="must be positive and shorter than duration"
type CertConfig struct {
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}

// CustomizeComponents patches the installed components.
//
// +kubebuilder:validation:XValidation:rule="(!has(self.patches) || size(self.patches) == 0) && !has(self.flags)",message="qvirt does not support customizeComponents: virt-operator installs the components as deploy/ declares them"
type CustomizeComponents struct {
	// +listType=atomic
	// +optional
	Patches []CustomizeComponentsPatch `json:"patches,omitempty"`
	// +optional
	Flags *Flags `json:"flags,omitempty"`
}

// CustomizeComponentsPatch is one patch of one component resource.
type CustomizeComponentsPatch struct {
	// +kubebuilder:validation:MinLength=1
	ResourceName string `json:"resourceName"`
	// +kubebuilder:validation:MinLength=1
	ResourceType string `json:"resourceType"`
	Patch        string `json:"patch"`
	// Type is json, merge or strategic.
	Type string `json:"type"`
}

// Flags replace the command-line flags of the components.
type Flags struct {
	// +optional
	API map[string]string `json:"api,omitempty"`
	// +optional
	Controller map[string]string `json:"controller,omitempty"`
	// +optional
	Handler map[string]string `json:"handler,omitempty"`
}

// KubeVirtPhase is the deployment phase.
type KubeVirtPhase string

const (
	KubeVirtPhaseDeploying KubeVirtPhase = "Deploying"
	KubeVirtPhaseDeployed  KubeVirtPhase = "Deployed"
	KubeVirtPhaseDeleting  KubeVirtPhase = "Deleting"
	KubeVirtPhaseDeleted   KubeVirtPhase = "Deleted"
)

// KubeVirtConditionType names a KubeVirt condition.
type KubeVirtConditionType string

const (
	KubeVirtConditionAvailable    KubeVirtConditionType = "Available"
	KubeVirtConditionProgressing  KubeVirtConditionType = "Progressing"
	KubeVirtConditionDegraded     KubeVirtConditionType = "Degraded"
	KubeVirtConditionCreated      KubeVirtConditionType = "Created"
	KubeVirtConditionSynchronized KubeVirtConditionType = "Synchronized"
)

// KubeVirtCondition is a condition of the installation.
type KubeVirtCondition struct {
	Type   KubeVirtConditionType  `json:"type"`
	Status corev1.ConditionStatus `json:"status"`
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

// KubeVirtStatus is owned by the system.
type KubeVirtStatus struct {
	// +optional
	Phase KubeVirtPhase `json:"phase,omitempty"`
	// +optional
	Conditions []KubeVirtCondition `json:"conditions,omitempty"`
	// +optional
	OperatorVersion string `json:"operatorVersion,omitempty"`
	// +optional
	TargetKubeVirtVersion string `json:"targetKubeVirtVersion,omitempty"`
	// +optional
	ObservedKubeVirtVersion string `json:"observedKubeVirtVersion,omitempty"`
	// +optional
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	// +optional
	DefaultArchitecture string `json:"defaultArchitecture,omitempty"`
}
