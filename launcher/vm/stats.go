package vm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
	"github.com/qvirt/qvirt/qmp"
)

// Stats takes one snapshot of the VM's counters: QEMU's CPU time from /proc, per-vCPU time
// from the vCPU threads QMP names, memory from the balloon and /proc, and block I/O from QMP.
// It costs a handful of QMP calls; callers that scrape often should cache it.
func (v *VM) Stats(ctx context.Context) (*launcherapi.StatsResponse, error) {
	mon, err := v.live()
	if err != nil {
		return nil, err
	}
	status := v.Status()
	pid := int(status.QemuPid)
	spec := v.Spec()
	out := &launcherapi.StatsResponse{UnixNano: time.Now().UnixNano(), Memory: &launcherapi.MemoryStats{GuestBytes: spec.GetMemoryBytes()}}
	if m := status.Migration; m != nil && m.Outgoing && migrating(m) {
		out.Migration = m
	}

	ps, err := readProcStat(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, fmt.Errorf("qemu cpu time: %w", err)
	}
	out.Cpu = &launcherapi.CPUStats{UserNs: ps.UserNanos, SystemNs: ps.SystemNanos}
	if out.Memory.RssBytes, err = readRSS(pid); err != nil {
		return nil, fmt.Errorf("qemu rss: %w", err)
	}

	if out.Vcpus, err = vcpuStats(ctx, mon, pid); err != nil {
		return nil, err
	}
	if spec.GetDevices().GetMemBalloon() {
		if err := balloonStats(ctx, mon, out.Memory); err != nil {
			return nil, err
		}
	}
	bs, err := mon.QueryBlockStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("block stats: %w", err)
	}
	v.mu.Lock()
	hotplugged := v.hotplugNodes
	v.mu.Unlock()
	out.Block = blockStats(bs, spec.GetDisks(), hotplugged)
	out.DirtyRate = dirtyRate(ctx, mon, out.Migration != nil)
	return out, nil
}

// dirtyRate reads the last sample of the guest's dirty rate and starts the next one, so that
// each snapshot reports a sample at most one snapshot old. It starts none while the VM migrates
// (QEMU's own counters serve then), and a failure costs only the sample.
func dirtyRate(ctx context.Context, mon *qmp.Client, migrating bool) *launcherapi.DirtyRate {
	d, err := mon.QueryDirtyRate(ctx)
	if err != nil {
		return nil
	}
	var out *launcherapi.DirtyRate
	if d.Status == qmp.DirtyRateMeasured && d.RateMiBPerSecond != nil && *d.RateMiBPerSecond >= 0 {
		out = &launcherapi.DirtyRate{BytesPerSecond: uint64(*d.RateMiBPerSecond) << 20}
	}
	if d.Status != qmp.DirtyRateMeasuring && !migrating {
		_ = mon.CalcDirtyRate(ctx, 1)
	}
	return out
}

func vcpuStats(ctx context.Context, mon *qmp.Client, pid int) ([]*launcherapi.VCPUStats, error) {
	cpus, err := mon.QueryCPUsFast(ctx)
	if err != nil {
		return nil, fmt.Errorf("vcpu threads: %w", err)
	}
	out := make([]*launcherapi.VCPUStats, 0, len(cpus))
	for _, c := range cpus {
		s := &launcherapi.VCPUStats{Id: uint32(c.CPUIndex), ThreadId: int64(c.ThreadID)}
		if run, wait, err := readSchedstat(pid, c.ThreadID); err == nil {
			s.RunNs, s.WaitNs = run, wait
		}
		if ts, err := readProcStat(fmt.Sprintf("/proc/%d/task/%d/stat", pid, c.ThreadID)); err == nil {
			s.State = ts.State
		}
		out = append(out, s)
	}
	return out, nil
}

func balloonStats(ctx context.Context, mon *qmp.Client, m *launcherapi.MemoryStats) error {
	actual, err := mon.QueryBalloon(ctx)
	if err != nil {
		return fmt.Errorf("balloon: %w", err)
	}
	m.BalloonActualBytes = uint64(actual)
	gs, err := mon.BalloonGuestStats(ctx, balloonPath)
	if err != nil {
		return fmt.Errorf("balloon guest stats: %w", err)
	}
	// The guest reports these only once its balloon driver runs; absent stays zero.
	m.AvailableBytes = deref(gs.TotalMemory)
	m.UnusedBytes = deref(gs.FreeMemory)
	m.UsableBytes = deref(gs.AvailableMemory)
	m.MajorFaults = deref(gs.MajorFaults)
	m.MinorFaults = deref(gs.MinorFaults)
	m.SwapInBytes = deref(gs.SwapIn)
	m.SwapOutBytes = deref(gs.SwapOut)
	m.CachedBytes = deref(gs.DiskCaches)
	return nil
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// blockStats maps QEMU's format nodes back to the disk names: the spec's, and those of the
// hotplugged disks (by format node).
func blockStats(bs []qmp.BlockStats, disks []*launcherapi.Disk, hotplugged map[string]string) []*launcherapi.BlockStats {
	var out []*launcherapi.BlockStats
	for _, b := range bs {
		name, ok := hotplugged[b.NodeName]
		if !ok {
			idx, ok := strings.CutPrefix(b.NodeName, "fmt-")
			if !ok {
				continue
			}
			i, err := strconv.Atoi(idx)
			if err != nil || i < 0 || i >= len(disks) || b.NodeName != qemuargs.FormatNode(i) {
				continue
			}
			name = disks[i].Name
		}
		s := b.Stats
		out = append(out, &launcherapi.BlockStats{
			Drive:       name,
			ReadBytes:   uint64(s.RdBytes),
			WriteBytes:  uint64(s.WrBytes),
			ReadOps:     uint64(s.RdOperations),
			WriteOps:    uint64(s.WrOperations),
			FlushOps:    uint64(s.FlushOperations),
			ReadTimeNs:  uint64(s.RdTotalTimeNs),
			WriteTimeNs: uint64(s.WrTotalTimeNs),
			FlushTimeNs: uint64(s.FlushTotalTimeNs),
		})
	}
	return out
}
