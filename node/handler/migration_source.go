package handler

import (
	"context"
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/config"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/launcherspec"
	"github.com/qvirt/qvirt/node/migrationproxy"
	"github.com/qvirt/qvirt/qmp"
)

// migrationPoll is how often a source re-reads its launcher while a migration runs, besides
// the launcher's own events.
const migrationPoll = 2 * time.Second

// driveSource runs this node's side of a migration of one of its VMs: once the target listens
// the source launcher is asked to migrate through this node's proxies, and its outcome is
// reported in status.migrationState (start, end, mode, completed or failed). A migration the
// controller marked failed (cancelled, target gone) is aborted here. It returns how soon to look
// again (0: nothing to follow).
func (h *Handler) driveSource(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState, lc *launcherConn, ls *launcherapi.StatusResponse) (time.Duration, error) {
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID == "" || ms.SourceNode != h.opts.NodeName || ms.Completed {
		st.dropLink()
		return 0, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("migration", string(ms.MigrationUID), "targetNode", ms.TargetNode)
	ctx = ctrl.LoggerInto(ctx, log)
	out := ls.GetMigration()
	if out != nil && !out.Outgoing {
		out = nil
	}
	link := st.link(ms.MigrationUID)
	started := link != nil && link.started

	switch {
	case ms.Failed:
		return 0, h.abortSource(ctx, vmi, st, lc, out, started)
	case (started || ms.StartTimestamp != nil) && (ls.ExitReason == launcherapi.ExitReason_EXIT_REASON_MIGRATED || out.GetState() == qmp.MigrationCompleted):
		// QEMU sent everything, also when an earlier run of this agent started it: the guest
		// is the target's now. The link stays until the VMI says so (the first case), so that
		// a reconcile on a copy that missed the write comes here again, not to the case below.
		log.Info("migration completed", "downtimeMs", out.GetDowntimeMs(), "mode", out.GetMode())
		return 0, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) {
			s.Completed = true
			s.EndTimestamp = unixTime(out.GetEndUnixNano())
			s.Mode = migrationMode(out, s.Mode)
		})
	case started && (out.GetState() == qmp.MigrationFailed || out.GetState() == qmp.MigrationCancelled):
		st.dropLink()
		why := out.GetMessage()
		if why == "" {
			why = "QEMU reported the migration " + out.GetState()
		}
		log.Info("migration failed; the VM keeps running here", "reason", why)
		return 0, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) {
			failMigration(s, why)
			s.Mode = migrationMode(out, s.Mode)
		})
	case started:
		if m := migrationMode(out, ms.Mode); m != ms.Mode {
			return migrationPoll, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) { s.Mode = m })
		}
		return migrationPoll, nil
	case ms.StartTimestamp != nil:
		// Started by an earlier run of this agent: its proxies went with it, so the move cannot
		// finish. The VM stays here.
		if migrating(out) {
			_, _ = lc.client.CancelMigration(ctx, &launcherapi.Empty{})
		}
		return 0, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) {
			failMigration(s, "the source node agent restarted during the migration")
		})
	case ms.TargetNodeAddress == "":
		return migrationPoll, nil // the target is not listening yet
	}
	return h.startSource(ctx, vmi, st, lc, ms)
}

// startSource opens this node's sockets for the source QEMU, each forwarded to the target's
// listener over mutual TLS, and asks the launcher to migrate with the cluster's settings.
func (h *Handler) startSource(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState, lc *launcherConn, ms *v1.VirtualMachineInstanceMigrationState) (time.Duration, error) {
	log := ctrl.LoggerFrom(ctx)
	if h.opts.Migration == nil {
		return 0, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) {
			failMigration(s, "the source node agent does not carry migrations")
		})
	}
	cfg, err := h.opts.Migration.clientTLS()
	if err != nil {
		return 0, fmt.Errorf("node CA: %w", err)
	}
	dir, err := st.dir.open(ctx)
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	link := &migrationLink{uid: ms.MigrationUID}
	for _, stream := range []int{streamState, streamDisks} {
		addr, err := targetPort(ms, stream)
		if err != nil {
			link.close()
			return 0, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) { failMigration(s, err.Error()) })
		}
		sock := streamSockets[stream][1]
		l, err := dir.ListenUnix(sock, h.opts.LauncherUID)
		if err != nil {
			link.close()
			return 0, fmt.Errorf("migration socket %s: %w", sock, err)
		}
		p, err := migrationproxy.NewSource(l, addr, ms.TargetNode, cfg, h.log.WithValues("vmi", st.key.String(), "stream", sock))
		if err != nil {
			_ = l.Close()
			link.close()
			return 0, fmt.Errorf("migration socket %s: %w", sock, err)
		}
		link.proxies = append(link.proxies, p)
	}
	st.setLink(link)

	req := migrateRequest(vmi, h.opts.Migration.Settings())
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := lc.client.Migrate(mctx, req); err != nil {
		st.dropLink()
		log.Error(err, "the launcher refused to migrate")
		return 0, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) {
			failMigration(s, "the source launcher refused to migrate: "+err.Error())
		})
	}
	link.started = true
	log.Info("migration started", "bandwidth", req.BandwidthBytesPerSecond, "completionTimeoutSeconds", req.CompletionTimeoutSeconds,
		"progressTimeoutSeconds", req.ProgressTimeoutSeconds, "autoConverge", req.AllowAutoConverge, "postCopy", req.AllowPostCopy)
	return migrationPoll, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) {
		now := metav1.Now()
		s.StartTimestamp = &now
		s.Mode = v1.MigrationPreCopy
	})
}

// abortSource ends this node's part of a migration the controller gave up on (cancelled,
// target gone): QEMU stops sending and the VM keeps running here.
func (h *Handler) abortSource(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState, lc *launcherConn, out *launcherapi.MigrationStatus, started bool) error {
	ms := vmi.Status.MigrationState
	defer st.dropLink()
	if !started || !migrating(out) {
		if ms.AbortRequested && ms.AbortStatus == "" {
			return h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) { s.AbortStatus = v1.MigrationAbortSucceeded })
		}
		return nil
	}
	status := v1.MigrationAbortSucceeded
	if _, err := lc.client.CancelMigration(ctx, &launcherapi.Empty{}); err != nil {
		// Post-copy cannot go back: the guest already runs on the target.
		ctrl.LoggerFrom(ctx).Error(err, "cancelling the migration")
		status = v1.MigrationAbortFailed
	} else {
		ctrl.LoggerFrom(ctx).Info("migration cancelled; the VM keeps running here", "reason", ms.FailureReason)
	}
	if !ms.AbortRequested {
		return nil
	}
	return h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) { s.AbortStatus = status })
}

// migrateRequest is the launcher's migrate call for vmi under the cluster's settings.
func migrateRequest(vmi *v1.VirtualMachineInstance, m config.Migrations) *launcherapi.MigrateRequest {
	req := &launcherapi.MigrateRequest{
		SocketPath: streamSockets[streamState][1], DisksSocketPath: streamSockets[streamDisks][1], CopyLocalDisks: true,
		BandwidthBytesPerSecond: m.BandwidthPerMigration, AllowAutoConverge: m.AllowAutoConverge, AllowPostCopy: m.AllowPostCopy,
		ProgressTimeoutSeconds: m.ProgressTimeout,
	}
	// KubeVirt's completion timeout grows with what has to move: per GiB of guest memory.
	if mem, err := launcherspec.GuestMemory(&vmi.Spec.Domain); err == nil && m.CompletionTimeoutPerGiB > 0 {
		req.CompletionTimeoutSeconds = int64(math.Ceil(float64(m.CompletionTimeoutPerGiB) * float64(mem) / (1 << 30)))
	}
	return req
}

func migrationMode(out *launcherapi.MigrationStatus, cur v1.MigrationMode) v1.MigrationMode {
	if m := out.GetMode(); m != "" {
		return v1.MigrationMode(m)
	}
	return cur
}

// migrating reports an outgoing migration that has not ended.
func migrating(out *launcherapi.MigrationStatus) bool {
	if out == nil || out.EndUnixNano != 0 {
		return false
	}
	switch out.State {
	case qmp.MigrationCompleted, qmp.MigrationFailed, qmp.MigrationCancelled:
		return false
	}
	return true
}

func unixTime(ns int64) *metav1.Time {
	t := metav1.Now()
	if ns > 0 {
		t = metav1.NewTime(time.Unix(0, ns))
	}
	return &t
}
