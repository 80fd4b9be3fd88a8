package vm

import (
	"context"
	"fmt"
	"time"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
	"github.com/qvirt/qvirt/qmp"
)

// localDisks are the format nodes of the VM's writable disks that live with the VM
// (containerDisk overlays, emptyDisks): a target has its own, so a migration copies them.
func localDisks(spec *launcherapi.VMSpec) []string {
	var nodes []string
	for i, d := range spec.GetDisks() {
		if d.ReadOnly || d.Device == launcherapi.DiskDevice_DISK_DEVICE_CDROM {
			continue
		}
		switch d.Source.(type) {
		case *launcherapi.Disk_ContainerDisk, *launcherapi.Disk_EmptyDisk:
			nodes = append(nodes, qemuargs.FormatNode(i))
		}
	}
	return nodes
}

// exportLocalDisks serves a target's local disks over NBD, for the source's mirrors to write.
func (v *VM) exportLocalDisks(ctx context.Context, mon *qmp.Client) error {
	nodes := localDisks(v.spec)
	if len(nodes) == 0 {
		return nil
	}
	if err := mon.NBDServerStart(ctx, v.layout.MigrationDisksSocket()); err != nil {
		return fmt.Errorf("serving the disks to copy: %w", err)
	}
	for _, n := range nodes {
		if err := mon.BlockExportAdd(ctx, n, true); err != nil {
			return fmt.Errorf("exporting %s: %w", n, err)
		}
	}
	return nil
}

// stopExports ends the target's NBD server before its guest runs.
func (v *VM) stopExports(ctx context.Context, mon *qmp.Client) error {
	if len(localDisks(v.spec)) == 0 {
		return nil
	}
	return mon.NBDServerStop(ctx)
}

// mirrorLocalDisks copies the source's local disks into the target's exports and waits until
// every copy is in sync. The mirrors block each guest write until the target has it too
// (copy-mode write-blocking), so the disks stay in sync up to the switchover: the target may
// run the guest as soon as the RAM has moved. It returns the nodes it mirrors, for endMirrors.
func (v *VM) mirrorLocalDisks(ctx context.Context, mon *qmp.Client, socket string) ([]string, error) {
	var mirrored []string
	for _, n := range localDisks(v.spec) {
		if err := mon.BlockdevAddNBD(ctx, mirrorTarget(n), socket, n); err != nil {
			return mirrored, fmt.Errorf("opening the target's %s: %w", n, err)
		}
		if err := mon.BlockdevMirror(ctx, mirrorJob(n), n, mirrorTarget(n)); err != nil {
			_ = mon.BlockdevDel(ctx, mirrorTarget(n))
			return mirrored, fmt.Errorf("mirroring %s: %w", n, err)
		}
		mirrored = append(mirrored, n)
	}
	var last diskProgress
	for len(mirrored) > 0 {
		list, err := mon.QueryBlockJobs(ctx)
		if err != nil {
			return mirrored, err
		}
		last = v.recordDiskProgress(list, last)
		ready := 0
		for _, j := range list {
			if j.Error != "" {
				return mirrored, fmt.Errorf("mirror %s: %s", j.Device, j.Error)
			}
			if j.Ready {
				ready++
			}
		}
		if ready == len(mirrored) || v.abortRequested() {
			return mirrored, nil
		}
		if len(list) < len(mirrored) {
			return mirrored, fmt.Errorf("a disk mirror ended before it was in sync (%d of %d running)", len(list), len(mirrored))
		}
		select {
		case <-ctx.Done():
			return mirrored, fmt.Errorf("disks not in sync: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, nil
}

// diskProgress is one read of the mirrors' progress.
type diskProgress struct {
	at     time.Time
	copied uint64
}

// recordDiskProgress puts the mirrors' progress into the migration status: bytes copied, the
// disks' bytes, and the rate since the previous read.
func (v *VM) recordDiskProgress(jobs []qmp.BlockJob, prev diskProgress) diskProgress {
	now := diskProgress{at: time.Now()}
	var total uint64
	for _, j := range jobs {
		now.copied += uint64(max(j.Offset, 0))
		total += uint64(max(j.Len, 0))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.status.Migration
	if m == nil {
		return now
	}
	m.DiskTransferredBytes, m.DiskTotalBytes = now.copied, total
	if dt := now.at.Sub(prev.at).Seconds(); !prev.at.IsZero() && dt > 0 && now.copied >= prev.copied {
		m.DiskBytesPerSecond = uint64(float64(now.copied-prev.copied) / dt)
	}
	return now
}

// endMirrors stops the mirrors of nodes (in sync once ready) and closes their targets.
func (v *VM) endMirrors(mon *qmp.Client, nodes []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := mon.BlockJobCancel(ctx, mirrorJob(n)); err != nil {
			v.log.Error(err, "ending a disk mirror", "job", mirrorJob(n))
		}
	}
	// The target nodes go once their jobs have.
	for _, n := range nodes {
		for {
			list, err := mon.QueryBlockJobs(ctx)
			if err != nil || !hasJob(list, mirrorJob(n)) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := mon.BlockdevDel(ctx, mirrorTarget(n)); err != nil {
			v.log.Error(err, "closing a disk mirror's target", "node", n)
		}
	}
}

func hasJob(list []qmp.BlockJob, job string) bool {
	for _, j := range list {
		if j.Device == job {
			return true
		}
	}
	return false
}

func mirrorTarget(node string) string { return "mig-" + node }
func mirrorJob(node string) string    { return "mirror-" + node }
