/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// KubeVirtConfiguration is spec.configuration of the KubeVirt CR. Components
// reload it when the CR changes.
//
// What qvirt does not read is refused where the API server can tell: a setting that changed
// nothing would be worse than none.
//
// +kubebuilder:validation:XValidation:rule="!has(self.cpuModel)",fieldPath=".cpuModel",message="qvirt does not support a cluster-wide cpuModel: set spec.domain.cpu.model in the VMs"
// +kubebuilder:validation:XValidation:rule="!has(self.cpuRequest)",fieldPath=".cpuRequest",message="qvirt does not support a cluster-wide cpuRequest: a launcher pod requests 100m CPU, KubeVirt's default, unless its VM sets spec.domain.resources.requests.cpu"
// +kubebuilder:validation:XValidation:rule="!has(self.imagePullPolicy)",fieldPath=".imagePullPolicy",message="qvirt does not support an imagePullPolicy for launcher pods: they pull the launcher image with Kubernetes' default policy"
// +kubebuilder:validation:XValidation:rule="!has(self.machineType) || self.machineType == 'q35'",fieldPath=".machineType",message="qvirt does not support a cluster-wide machineType other than q35, the default: set spec.domain.machine.type in the VMs"
// +kubebuilder:validation:XValidation:rule="!has(self.memBalloonStatsPeriod)",fieldPath=".memBalloonStatsPeriod",message="qvirt does not support memBalloonStatsPeriod: launchers poll the guest's memory statistics at a fixed period"
// +kubebuilder:validation:XValidation:rule="!has(self.tlsConfiguration)",fieldPath=".tlsConfiguration",message="qvirt does not support TLS settings for its servers yet"
type KubeVirtConfiguration struct {
	// +optional
	CPUModel string `json:"cpuModel,omitempty"`
	// +optional
	CPURequest *resource.Quantity `json:"cpuRequest,omitempty"`
	// +optional
	DeveloperConfiguration *DeveloperConfiguration `json:"developerConfiguration,omitempty"`
	// ImagePullPolicy applies to launcher pods.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// +optional
	MigrationConfiguration *MigrationConfiguration `json:"migrations,omitempty"`
	// +optional
	MachineType string `json:"machineType,omitempty"`
	// +optional
	NetworkConfiguration *NetworkConfiguration `json:"network,omitempty"`
	// EvictionStrategy is the cluster default; a VMI's own setting wins.
	// +kubebuilder:validation:Enum=None;LiveMigrate;LiveMigrateIfPossible;External
	// +optional
	EvictionStrategy *EvictionStrategy `json:"evictionStrategy,omitempty"`
	// +optional
	MemBalloonStatsPeriod *uint32 `json:"memBalloonStatsPeriod,omitempty"`
	// APIConfiguration tunes the API server's client to Kubernetes.
	// +optional
	APIConfiguration *ReloadableComponentConfiguration `json:"apiConfiguration,omitempty"`
	// +optional
	WebhookConfiguration *ReloadableComponentConfiguration `json:"webhookConfiguration,omitempty"`
	// +optional
	ControllerConfiguration *ReloadableComponentConfiguration `json:"controllerConfiguration,omitempty"`
	// +optional
	HandlerConfiguration *ReloadableComponentConfiguration `json:"handlerConfiguration,omitempty"`
	// +optional
	TLSConfiguration *TLSConfiguration `json:"tlsConfiguration,omitempty"`
}

// DeveloperConfiguration holds feature gates and emulation.
//
// +kubebuilder:validation:XValidation:rule="!has(self.memoryOvercommit) || self.memoryOvercommit == 100",fieldPath=".memoryOvercommit",message="qvirt does not support memory overcommit: a guest's memory is its request (memoryOvercommit 100, the default)"
// +kubebuilder:validation:XValidation:rule="!has(self.cpuAllocationRatio)",fieldPath=".cpuAllocationRatio",message="qvirt does not support cpuAllocationRatio: a launcher pod requests 100m CPU unless its VM sets spec.domain.resources.requests.cpu"
// +kubebuilder:validation:XValidation:rule="!has(self.nodeSelectors) || size(self.nodeSelectors) == 0",fieldPath=".nodeSelectors",message="qvirt does not support cluster-wide nodeSelectors: set spec.nodeSelector in the VMs"
// +kubebuilder:validation:XValidation:rule="!has(self.logVerbosity)",fieldPath=".logVerbosity",message="qvirt does not support logVerbosity"
type DeveloperConfiguration struct {
	// FeatureGates to enable; a gate may not also be in disabledFeatureGates.
	// +listType=atomic
	// +optional
	FeatureGates []string `json:"featureGates,omitempty"`
	// +listType=atomic
	// +optional
	DisabledFeatureGates []string `json:"disabledFeatureGates,omitempty"`
	// UseEmulation runs guests under software emulation (TCG) when KVM is missing.
	// +optional
	UseEmulation bool `json:"useEmulation,omitempty"`
	// MemoryOvercommit is the guest memory as a percentage of the pod's.
	// +kubebuilder:validation:Minimum=10
	// +optional
	MemoryOvercommit int `json:"memoryOvercommit,omitempty"`
	// CPUAllocationRatio is vCPUs per requested physical CPU.
	// +optional
	CPUAllocationRatio int `json:"cpuAllocationRatio,omitempty"`
	// NodeSelectors restrict all VMIs to matching nodes.
	// +optional
	NodeSelectors map[string]string `json:"nodeSelectors,omitempty"`
	// +optional
	LogVerbosity *LogVerbosity `json:"logVerbosity,omitempty"`
}

// LogVerbosity sets the log level of each component.
type LogVerbosity struct {
	// +optional
	VirtAPI uint `json:"virtAPI,omitempty"`
	// +optional
	VirtController uint `json:"virtController,omitempty"`
	// +optional
	VirtHandler uint `json:"virtHandler,omitempty"`
	// +optional
	VirtLauncher uint `json:"virtLauncher,omitempty"`
	// +optional
	VirtOperator uint `json:"virtOperator,omitempty"`
	// +optional
	NodeVerbosity map[string]uint `json:"nodeVerbosity,omitempty"`
}

// MigrationConfiguration are the cluster-wide live migration settings (defaults:
// 5 per cluster, 2 outbound per node, progress timeout 150 s, 150 s per GiB,
// bandwidth unlimited).
//
// qvirt's parallel migration limits are fixed at KubeVirt's defaults; the settings of one
// migration (bandwidth, timeouts, auto-converge, post-copy) are read by the node agents.
//
// +kubebuilder:validation:XValidation:rule="!has(self.nodeDrainTaintKey) && !has(self.maxDowntimeMs) && !has(self.unsafeMigrationOverride) && !has(self.allowWorkloadDisruption) && !has(self.disableTLS) && !has(self.network) && !has(self.matchSELinuxLevelOnMigration) && (!has(self.parallelMigrationsPerCluster) || self.parallelMigrationsPerCluster == 5) && (!has(self.parallelOutboundMigrationsPerNode) || self.parallelOutboundMigrationsPerNode == 2)",message="qvirt does not support these migration settings: it reads bandwidthPerMigration, completionTimeoutPerGiB, progressTimeout, allowAutoConverge and allowPostCopy, and accepts parallelMigrationsPerCluster 5 and parallelOutboundMigrationsPerNode 2, its fixed limits"
type MigrationConfiguration struct {
	// +optional
	NodeDrainTaintKey *string `json:"nodeDrainTaintKey,omitempty"`
	// +optional
	ParallelOutboundMigrationsPerNode *uint32 `json:"parallelOutboundMigrationsPerNode,omitempty"`
	// +optional
	ParallelMigrationsPerCluster *uint32 `json:"parallelMigrationsPerCluster,omitempty"`
	// +optional
	AllowAutoConverge *bool `json:"allowAutoConverge,omitempty"`
	// BandwidthPerMigration is bytes per second; 0 means unlimited.
	// +optional
	BandwidthPerMigration *resource.Quantity `json:"bandwidthPerMigration,omitempty"`
	// +optional
	CompletionTimeoutPerGiB *int64 `json:"completionTimeoutPerGiB,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2000000
	// +optional
	MaxDowntimeMs *uint64 `json:"maxDowntimeMs,omitempty"`
	// ProgressTimeout is seconds without progress before a migration is cancelled.
	// +optional
	ProgressTimeout *int64 `json:"progressTimeout,omitempty"`
	// +optional
	UnsafeMigrationOverride *bool `json:"unsafeMigrationOverride,omitempty"`
	// +optional
	AllowPostCopy *bool `json:"allowPostCopy,omitempty"`
	// +optional
	AllowWorkloadDisruption *bool `json:"allowWorkloadDisruption,omitempty"`
	// +optional
	DisableTLS *bool `json:"disableTLS,omitempty"`
	// Network is a NetworkAttachmentDefinition to migrate over instead of the pod network.
	// +optional
	Network *string `json:"network,omitempty"`
	// +optional
	MatchSELinuxLevelOnMigration *bool `json:"matchSELinuxLevelOnMigration,omitempty"`
}

// NetworkConfiguration are cluster-wide network settings.
//
// +kubebuilder:validation:XValidation:rule="(!has(self.defaultNetworkInterface) || self.defaultNetworkInterface == 'bridge') && (!has(self.permitBridgeInterfaceOnPodNetwork) || self.permitBridgeInterfaceOnPodNetwork)",message="qvirt does not support network settings other than KubeVirt's defaults: defaultNetworkInterface bridge, permitBridgeInterfaceOnPodNetwork true"
type NetworkConfiguration struct {
	// +optional
	NetworkInterface string `json:"defaultNetworkInterface,omitempty"`
	// PermitBridgeInterfaceOnPodNetwork allows bridge binding on the pod network.
	// +optional
	PermitBridgeInterfaceOnPodNetwork *bool `json:"permitBridgeInterfaceOnPodNetwork,omitempty"`
}

// ReloadableComponentConfiguration is per-component settings applied without a
// restart.
type ReloadableComponentConfiguration struct {
	// +optional
	RestClient *RESTClientConfiguration `json:"restClient,omitempty"`
}

// RESTClientConfiguration tunes a component's Kubernetes client.
type RESTClientConfiguration struct {
	// +optional
	RateLimiter *RateLimiter `json:"rateLimiter,omitempty"`
}

// RateLimiter picks a client rate limiter.
type RateLimiter struct {
	// +optional
	TokenBucketRateLimiter *TokenBucketRateLimiter `json:"tokenBucketRateLimiter,omitempty"`
}

// TokenBucketRateLimiter limits a component's client requests, applied without a restart.
// Without one a component keeps its default: virt-api QPS 30, burst 50; KubeVirt's for the
// others (virt-controller 200/400, virt-handler 50/100, webhookConfiguration, which limits
// virt-api's SubjectAccessReviews, 200/400).
type TokenBucketRateLimiter struct {
	// QPS is requests per second, above 0 (KubeVirt would stall its client at 0). Format float
	// refuses values beyond float32, which no component could decode.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=number
	// +kubebuilder:validation:Format=float
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=true
	QPS float32 `json:"qps"` // a float as in KubeVirt; Schemaless avoids allowing floats package-wide
	// Burst is the bucket size: the requests allowed at once, at least 1.
	// +kubebuilder:validation:Minimum=1
	Burst int `json:"burst"`
}

// TLSConfiguration sets the TLS parameters of the component servers.
type TLSConfiguration struct {
	// +kubebuilder:validation:Enum=VersionTLS10;VersionTLS11;VersionTLS12;VersionTLS13
	// +optional
	MinTLSVersion string `json:"minTLSVersion,omitempty"`
	// +listType=set
	// +optional
	Ciphers []string `json:"ciphers,omitempty"`
}
