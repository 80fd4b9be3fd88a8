package migration

import (
	"fmt"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// Limits cap how many migrations run at once; the rest wait in Pending.
type Limits struct {
	// PerCluster is the number of migrations in flight cluster-wide (KubeVirt: 5).
	PerCluster int
	// OutboundPerNode is the number of migrations leaving one node (KubeVirt: 2).
	OutboundPerNode int
}

// DefaultLimits are KubeVirt's defaults.
func DefaultLimits() Limits { return Limits{PerCluster: 5, OutboundPerNode: 2} }

// InFlight reports a migration that holds a slot: past Pending, not finished,
// not being cancelled.
func InFlight(m *virtv1.VirtualMachineInstanceMigration) bool {
	if m.DeletionTimestamp != nil {
		return false
	}
	switch m.Status.Phase {
	case virtv1.MigrationScheduling, virtv1.MigrationScheduled, virtv1.MigrationPreparingTarget,
		virtv1.MigrationTargetReady, virtv1.MigrationRunning:
		return true
	}
	return false
}

// IsFinal reports a migration that ended.
func IsFinal(m *virtv1.VirtualMachineInstanceMigration) bool {
	return m.Status.Phase == virtv1.MigrationSucceeded || m.Status.Phase == virtv1.MigrationFailed
}

func sourceNode(m *virtv1.VirtualMachineInstanceMigration) string {
	if m.Status.MigrationState == nil {
		return ""
	}
	return m.Status.MigrationState.SourceNode
}

// Admit decides whether mig, moving a VMI off node, may leave Pending given all
// migrations of the cluster. It returns why not when it may not. A VMI is only
// ever migrated by one migration at a time.
func Admit(mig *virtv1.VirtualMachineInstanceMigration, node string, all []virtv1.VirtualMachineInstanceMigration, l Limits) (bool, string) {
	total, fromNode := 0, 0
	for i := range all {
		m := &all[i]
		if m.UID == mig.UID || !InFlight(m) {
			continue
		}
		if m.Namespace == mig.Namespace && m.Spec.VMIName == mig.Spec.VMIName {
			return false, fmt.Sprintf("migration %s of the same VMI is in progress", m.Name)
		}
		total++
		if sourceNode(m) == node {
			fromNode++
		}
	}
	if l.PerCluster > 0 && total >= l.PerCluster {
		return false, fmt.Sprintf("%d migrations are running in the cluster, the limit is %d", total, l.PerCluster)
	}
	if l.OutboundPerNode > 0 && fromNode >= l.OutboundPerNode {
		return false, fmt.Sprintf("%d migrations are leaving node %s, the limit is %d", fromNode, node, l.OutboundPerNode)
	}
	return true, ""
}
