package kvclient

import v1 "github.com/qvirt/qvirt/api/v1"

// The request bodies of KubeVirt's subresources, field for field: empty fields are left out,
// so a plain `virtctl start` sends {}.

// The bodies are the API's own types.
type (
	StartOptions   = v1.StartOptions
	StopOptions    = v1.StopOptions
	RestartOptions = v1.RestartOptions
	MigrateOptions = v1.MigrateOptions
	PauseOptions   = v1.PauseOptions

	AddVolumeOptions    = v1.AddVolumeOptions
	RemoveVolumeOptions = v1.RemoveVolumeOptions
	MemoryDumpRequest   = v1.VirtualMachineMemoryDumpRequest
)

// DryRunAll is the only dry-run value the API accepts.
const DryRunAll = v1.DryRunAll

// DryRun is the dryRun field for a --dry-run flag.
func DryRun(on bool) []string {
	if on {
		return []string{DryRunAll}
	}
	return nil
}
