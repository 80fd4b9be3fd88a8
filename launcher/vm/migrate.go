package vm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/ptr"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/qmp"
)

// Migration modes, as KubeVirt names them in a VMI's migrationState.
const (
	ModePreCopy  = "PreCopy"
	ModePostCopy = "PostCopy"
)

// migrationPoll is how often an outgoing migration's progress is read (query-migrate).
const migrationPoll = 250 * time.Millisecond

var (
	// ErrMigrating is returned when a migration is asked for while one is in flight.
	ErrMigrating = errors.New("vm: a migration is in flight")
	// ErrNoMigration is returned by CancelMigration when nothing is migrating.
	ErrNoMigration = errors.New("vm: no migration in flight")
)

// listenIncoming makes a target QEMU (started with -incoming defer) accept the source's
// stream on MigrationSocket.
func (v *VM) listenIncoming(ctx context.Context) error {
	mon := v.monitor()
	if err := mon.MigrateSetCapabilities(ctx, map[string]bool{"events": true}); err != nil {
		return fmt.Errorf("migration capabilities: %w", err)
	}
	// A source may switch to post-copy only if the target agreed to it beforehand; where the
	// kernel has no userfaultfd for QEMU, the target takes pre-copy only.
	if err := mon.MigrateSetCapabilities(ctx, map[string]bool{"postcopy-ram": true}); err != nil {
		v.log.Info("migration target without post-copy", "reason", err.Error())
	}
	if err := v.exportLocalDisks(ctx, mon); err != nil {
		return err
	}
	v.mu.Lock()
	v.status.Migration = &launcherapi.MigrationStatus{State: qmp.MigrationSetup, StartUnixNano: time.Now().UnixNano(), Mode: ModePreCopy}
	v.mu.Unlock()
	return mon.MigrateIncoming(ctx, "unix:"+v.layout.MigrationSocket())
}

// incomingMigration follows a target's MIGRATION events: once the source's state has arrived
// the guest runs here; a failed incoming migration ends QEMU by itself.
func (v *VM) incomingMigration(status string) {
	v.mu.Lock()
	m := v.status.Migration
	if v.status.State != launcherapi.State_STATE_MIGRATING_IN || m == nil || m.Outgoing {
		v.mu.Unlock()
		return
	}
	m.State = status
	if status == qmp.MigrationPostcopyActive {
		m.Mode = ModePostCopy
	}
	v.publishLocked("MIGRATION")
	v.mu.Unlock()
	if status != qmp.MigrationCompleted && status != qmp.MigrationPostcopyActive {
		return
	}
	mon, err := v.live()
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), v.cfg.QuitTimeout)
		defer cancel()
		if status == qmp.MigrationCompleted {
			if err := v.stopExports(ctx, mon); err != nil {
				v.log.Error(err, "ending the disk exports")
			}
		}
		// Post-copy runs the guest here as soon as it switches over; otherwise QEMU, started
		// with -S, waits for cont once all of the state is in.
		if st, err := mon.Status(ctx); err == nil && st.Status != qmp.StatusRunning {
			if err := mon.Cont(ctx); err != nil {
				v.log.Error(err, "resuming the migrated guest")
				return
			}
		}
		v.mu.Lock()
		if status == qmp.MigrationCompleted && v.status.Migration != nil {
			v.status.Migration.EndUnixNano = time.Now().UnixNano()
		}
		v.mu.Unlock()
		v.setState(launcherapi.State_STATE_RUNNING, "MIGRATION")
		v.log.Info("migrated guest running here", "migration", status)
	}()
}

// Migrate starts sending the running VM to the target listening on req.SocketPath and returns
// once QEMU has begun; the migration's progress shows in Status().Migration. On success the
// source QEMU quits and the VM ends with EXIT_REASON_MIGRATED; on failure or cancel the guest
// keeps running here.
func (v *VM) Migrate(ctx context.Context, req *launcherapi.MigrateRequest) error {
	mon, err := v.live()
	if err != nil {
		return err
	}
	v.mu.Lock()
	switch {
	case v.status.State != launcherapi.State_STATE_RUNNING && v.status.State != launcherapi.State_STATE_PAUSED:
		v.mu.Unlock()
		return fmt.Errorf("%w: the VM is %s", ErrNotRunning, v.status.State)
	case migrating(v.status.Migration):
		v.mu.Unlock()
		return ErrMigrating
	case len(v.status.HotpluggedDisks) > 0:
		v.mu.Unlock()
		return ErrHotplugged
	}
	v.status.Migration = &launcherapi.MigrationStatus{State: qmp.MigrationSetup, Outgoing: true, StartUnixNano: time.Now().UnixNano(), Mode: ModePreCopy}
	v.publishLocked("MIGRATION")
	v.mu.Unlock()

	if err := v.setMigrationParams(ctx, mon, req); err != nil {
		v.endMigration(qmp.MigrationFailed, err.Error())
		return err
	}
	go v.runMigration(mon, req)
	return nil
}

// runMigration copies the local disks when asked, then the RAM, and follows the migration to
// its end; the disk mirrors end with it.
func (v *VM) runMigration(mon *qmp.Client, req *launcherapi.MigrateRequest) {
	var mirrors []string
	if req.CopyLocalDisks && len(localDisks(v.spec)) > 0 {
		ctx, cancel := v.migrationDeadline(req)
		var err error
		mirrors, err = v.mirrorLocalDisks(ctx, mon, req.DisksSocketPath)
		cancel()
		if err == nil && v.abortRequested() {
			err = errors.New("cancelled")
		}
		if err != nil {
			v.endMirrors(mon, mirrors)
			v.endMigration(qmp.MigrationFailed, "copying the local disks: "+err.Error())
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := mon.Migrate(ctx, "unix:"+req.SocketPath)
	cancel()
	if err != nil {
		v.endMirrors(mon, mirrors)
		v.endMigration(qmp.MigrationFailed, err.Error())
		return
	}
	info := v.followMigration(mon, req)
	v.endMirrors(mon, mirrors)
	if info.Status == qmp.MigrationCompleted {
		v.migrated(mon, info)
	}
}

// abortRequested reports a cancel asked for before QEMU's own migration began.
func (v *VM) abortRequested() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.status.Migration != nil && v.status.Migration.AbortRequested
}

// migrationDeadline bounds the disk copy by the completion timeout, when there is one.
func (v *VM) migrationDeadline(req *launcherapi.MigrateRequest) (context.Context, context.CancelFunc) {
	if req.CompletionTimeoutSeconds > 0 {
		return context.WithTimeout(context.Background(), time.Duration(req.CompletionTimeoutSeconds)*time.Second)
	}
	return context.WithCancel(context.Background())
}

func (v *VM) setMigrationParams(ctx context.Context, mon *qmp.Client, req *launcherapi.MigrateRequest) error {
	if req.CopyLocalDisks && len(localDisks(v.spec)) > 0 && req.DisksSocketPath == "" {
		return fmt.Errorf("copying the local disks needs the target's disks socket")
	}
	caps := map[string]bool{"events": true, "auto-converge": req.AllowAutoConverge, "postcopy-ram": req.AllowPostCopy}
	if err := mon.MigrateSetCapabilities(ctx, caps); err != nil {
		return fmt.Errorf("migration capabilities %v: %w", caps, err)
	}
	// max-bandwidth is bytes per second; 0 would stall the migration, so "no limit" is QEMU's
	// largest value.
	bw := req.BandwidthBytesPerSecond
	if bw == 0 {
		bw = 1<<63 - 1
	}
	if err := mon.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": bw}); err != nil {
		return fmt.Errorf("migration parameters: %w", err)
	}
	return nil
}

// followMigration reads an outgoing migration's progress until it ends, enforcing its
// completion and progress timeouts: past completion, a migration allowed post-copy switches to
// it, any other is aborted; one whose remaining data stops shrinking is aborted.
func (v *VM) followMigration(mon *qmp.Client, req *launcherapi.MigrateRequest) qmp.MigrationInfo {
	completion := time.Duration(req.CompletionTimeoutSeconds) * time.Second
	progress := time.Duration(req.ProgressTimeoutSeconds) * time.Second
	start := time.Now()
	lastProgress, leastRemaining := start, int64(-1)
	postcopy := false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, err := mon.QueryMigrate(ctx)
		cancel()
		if err != nil {
			v.endMigration(qmp.MigrationFailed, fmt.Sprintf("query-migrate: %v", err))
			return qmp.MigrationInfo{Status: qmp.MigrationFailed}
		}
		v.recordProgress(info)
		switch info.Status {
		case qmp.MigrationCompleted:
			return info
		case qmp.MigrationFailed, qmp.MigrationCancelled:
			msg := info.ErrorDesc
			if msg == "" {
				msg = "migration " + info.Status
			}
			v.endMigration(info.Status, msg)
			return info
		}
		if info.RAM != nil && (leastRemaining < 0 || info.RAM.Remaining < leastRemaining) {
			leastRemaining, lastProgress = info.RAM.Remaining, time.Now()
		}
		switch {
		case postcopy || info.Status == qmp.MigrationPostcopyActive:
			// Post-copy cannot be aborted without losing the guest; it runs to its end.
		case completion > 0 && time.Since(start) > completion && req.AllowPostCopy:
			postcopy = true
			v.log.Info("migration past its completion timeout: switching to post-copy", "timeout", completion)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := mon.MigrateStartPostcopy(ctx); err != nil {
				v.log.Error(err, "switching to post-copy")
			} else {
				// The switch can be over before a poll sees postcopy-active.
				v.mu.Lock()
				if m := v.status.Migration; m != nil {
					m.Mode = ModePostCopy
				}
				v.mu.Unlock()
			}
			cancel()
		case completion > 0 && time.Since(start) > completion:
			v.abort(mon, fmt.Sprintf("migration did not complete within its completion timeout of %s", completion))
		case progress > 0 && time.Since(lastProgress) > progress:
			v.abort(mon, fmt.Sprintf("migration made no progress for %s (progress timeout)", progress))
		}
		time.Sleep(migrationPoll)
	}
}

// recordProgress copies query-migrate's counters into the status.
func (v *VM) recordProgress(info qmp.MigrationInfo) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.status.Migration
	if m == nil {
		return
	}
	changed := m.State != info.Status
	m.State = info.Status
	if info.Status == qmp.MigrationPostcopyActive {
		m.Mode = ModePostCopy
	}
	if r := info.RAM; r != nil {
		m.TransferredBytes, m.RemainingBytes, m.TotalBytes = uint64(r.Transferred), uint64(r.Remaining), uint64(r.Total)
		m.DirtyPagesRate = uint64(r.DirtyPagesRate)
		m.DirtyMemoryBytesPerSecond = uint64(max(r.DirtyPagesRate*r.PageSize, 0))
		// QEMU's mbps is megabits per second.
		m.MemoryBytesPerSecond = uint64(max(r.Mbps*1e6/8, 0))
	}
	if info.Downtime != nil {
		m.DowntimeMs = *info.Downtime
	}
	if changed {
		v.publishLocked("MIGRATION")
	}
}

// abort cancels the outgoing migration for a reason the status then carries.
func (v *VM) abort(mon *qmp.Client, why string) {
	v.log.Info("aborting the migration", "reason", why)
	v.mu.Lock()
	if m := v.status.Migration; m != nil {
		m.AbortRequested = true
		m.Message = why
	}
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := mon.MigrateCancel(ctx); err != nil {
		v.log.Error(err, "migrate_cancel")
	}
}

// CancelMigration aborts the outgoing migration; the guest keeps running here.
func (v *VM) CancelMigration(context.Context) error {
	mon, err := v.live()
	if err != nil {
		return err
	}
	v.mu.Lock()
	m := v.status.Migration
	ok := m != nil && m.Outgoing && migrating(m)
	v.mu.Unlock()
	if !ok {
		return ErrNoMigration
	}
	v.abort(mon, "migration cancelled on request")
	return nil
}

// endMigration records a migration that ended without moving the VM.
func (v *VM) endMigration(state, msg string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.status.Migration
	if m == nil {
		return
	}
	m.State, m.EndUnixNano = state, time.Now().UnixNano()
	if m.Message == "" {
		m.Message = msg
	}
	v.log.Info("migration ended; the VM runs here", "state", state, "message", m.Message)
	v.publishLocked("MIGRATION")
}

// migrated ends the source once the target holds the guest: QEMU, paused after the
// switchover, quits, and the VM's exit is reported as migrated.
func (v *VM) migrated(mon *qmp.Client, info qmp.MigrationInfo) {
	v.mu.Lock()
	if m := v.status.Migration; m != nil {
		m.EndUnixNano = time.Now().UnixNano()
	}
	v.stopping = intentMigrated
	v.mu.Unlock()
	v.log.Info("migration completed", "downtimeMs", ptr.Deref(info.Downtime, 0), "totalTimeMs", ptr.Deref(info.TotalTime, 0))
	ctx, cancel := context.WithTimeout(context.Background(), v.cfg.QuitTimeout)
	defer cancel()
	if err := mon.Quit(ctx); err != nil {
		v.signalKill()
	}
}

// migrating reports a migration that has not ended.
func migrating(m *launcherapi.MigrationStatus) bool {
	if m == nil {
		return false
	}
	switch m.State {
	case qmp.MigrationCompleted, qmp.MigrationFailed, qmp.MigrationCancelled:
		return false
	}
	return m.EndUnixNano == 0
}
