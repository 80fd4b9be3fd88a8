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
// run the guest as soon as the RAM has moved.
func (v *VM) mirrorLocalDisks(ctx context.Context, mon *qmp.Client, socket string) ([]string, error) {
	var jobs []string
	for _, n := range localDisks(v.spec) {
		if err := mon.BlockdevAddNBD(ctx, mirrorTarget(n), socket, n); err != nil {
			return jobs, fmt.Errorf("opening the target's %s: %w", n, err)
		}
		job := "mirror-" + n
		if err := mon.BlockdevMirror(ctx, job, n, mirrorTarget(n)); err != nil {
			_ = mon.BlockdevDel(ctx, mirrorTarget(n))
			return jobs, fmt.Errorf("mirroring %s: %w", n, err)
		}
		jobs = append(jobs, job)
	}
	for len(jobs) > 0 {
		list, err := mon.QueryBlockJobs(ctx)
		if err != nil {
			return jobs, err
		}
		ready := 0
		for _, j := range list {
			if j.Error != "" {
				return jobs, fmt.Errorf("mirror %s: %s", j.Device, j.Error)
			}
			if j.Ready {
				ready++
			}
		}
		if ready == len(jobs) || v.abortRequested() {
			return jobs, nil
		}
		if len(list) < len(jobs) {
			return jobs, fmt.Errorf("a disk mirror ended before it was in sync (%d of %d running)", len(list), len(jobs))
		}
		select {
		case <-ctx.Done():
			return jobs, fmt.Errorf("disks not in sync: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, nil
}

// endMirrors stops the disk mirrors (in sync once ready) and closes their targets.
func (v *VM) endMirrors(mon *qmp.Client, jobs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, job := range jobs {
		if err := mon.BlockJobCancel(ctx, job); err != nil {
			v.log.Error(err, "ending a disk mirror", "job", job)
		}
	}
	// The target nodes go once their jobs have.
	for _, job := range jobs {
		node := job[len("mirror-"):]
		for {
			list, err := mon.QueryBlockJobs(ctx)
			if err != nil || !hasJob(list, job) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := mon.BlockdevDel(ctx, mirrorTarget(node)); err != nil {
			v.log.Error(err, "closing a disk mirror's target", "node", node)
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
