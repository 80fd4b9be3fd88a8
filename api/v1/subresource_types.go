package v1

// The request bodies of the subresources.kubevirt.io/v1 API, as KubeVirt's: empty fields are
// left out, so a plain start sends {}. Shared by virt-api (decoding) and virtctl (encoding).

// DryRunAll is the only dry-run value the API accepts.
const DryRunAll = "All"

// StartOptions is the body of virtualmachines/{name}/start.
// +kubebuilder:object:generate=false
type StartOptions struct {
	Paused bool     `json:"paused,omitempty"`
	DryRun []string `json:"dryRun,omitempty"`
}

// StopOptions is the body of virtualmachines/{name}/stop.
// +kubebuilder:object:generate=false
type StopOptions struct {
	GracePeriod *int64   `json:"gracePeriod,omitempty"`
	DryRun      []string `json:"dryRun,omitempty"`
}

// RestartOptions is the body of virtualmachines/{name}/restart.
// +kubebuilder:object:generate=false
type RestartOptions struct {
	GracePeriodSeconds *int64   `json:"gracePeriodSeconds,omitempty"`
	DryRun             []string `json:"dryRun,omitempty"`
}

// MigrateOptions is the body of virtualmachines/{name}/migrate.
// +kubebuilder:object:generate=false
type MigrateOptions struct {
	AddedNodeSelector map[string]string `json:"addedNodeSelector,omitempty"`
	DryRun            []string          `json:"dryRun,omitempty"`
}

// PauseOptions is the body of virtualmachineinstances/{name}/pause and unpause.
// +kubebuilder:object:generate=false
type PauseOptions struct {
	DryRun []string `json:"dryRun,omitempty"`
}
