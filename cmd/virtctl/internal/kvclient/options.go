package kvclient

// The request bodies of KubeVirt's subresources, field for field: empty fields are left out,
// so a plain `virtctl start` sends {}.

// DryRunAll is the only dry-run value the API accepts.
const DryRunAll = "All"

// StartOptions is the body of virtualmachines/{name}/start.
type StartOptions struct {
	Paused bool     `json:"paused,omitempty"`
	DryRun []string `json:"dryRun,omitempty"`
}

// StopOptions is the body of virtualmachines/{name}/stop.
type StopOptions struct {
	GracePeriod *int64   `json:"gracePeriod,omitempty"`
	DryRun      []string `json:"dryRun,omitempty"`
}

// RestartOptions is the body of virtualmachines/{name}/restart.
type RestartOptions struct {
	GracePeriodSeconds *int64   `json:"gracePeriodSeconds,omitempty"`
	DryRun             []string `json:"dryRun,omitempty"`
}

// MigrateOptions is the body of virtualmachines/{name}/migrate.
type MigrateOptions struct {
	AddedNodeSelector map[string]string `json:"addedNodeSelector,omitempty"`
	DryRun            []string          `json:"dryRun,omitempty"`
}

// PauseOptions is the body of virtualmachineinstances/{name}/pause and unpause.
type PauseOptions struct {
	DryRun []string `json:"dryRun,omitempty"`
}

// DryRun is the dryRun field for a --dry-run flag.
func DryRun(on bool) []string {
	if on {
		return []string{DryRunAll}
	}
	return nil
}
