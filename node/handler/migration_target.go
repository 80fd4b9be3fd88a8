package handler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/migrationproxy"
)

// migratingHere returns the VMI's active migration when this node is its target.
func (h *Handler) migratingHere(vmi *v1.VirtualMachineInstance) *v1.VirtualMachineInstanceMigrationState {
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID == "" || ms.TargetNode != h.opts.NodeName || ms.Failed {
		return nil
	}
	return ms
}

// reconcileTarget runs this node's side of a migration into it: the target launcher's QEMU
// is started waiting for the VM, the streams are listened for (mutual TLS, the source node's
// certificate only), and once the source reports the move complete and the guest runs here
// the VMI is taken over: its status.nodeName becomes this node.
func (h *Handler) reconcileTarget(ctx context.Context, vmi *v1.VirtualMachineInstance, ms *v1.VirtualMachineInstanceMigrationState) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("migration", string(ms.MigrationUID), "sourceNode", ms.SourceNode)
	ctx = ctrl.LoggerInto(ctx, log)
	if h.opts.Migration == nil {
		return ctrl.Result{}, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) {
			failMigration(s, "the target node agent does not carry migrations")
		})
	}
	st := h.state(vmi, true)
	lc, err := st.connect()
	if err != nil {
		log.V(1).Info("target launcher not reachable yet", "err", err.Error())
		return ctrl.Result{RequeueAfter: retryLauncher}, nil
	}
	ls, err := lc.status(ctx)
	if err != nil {
		log.Info("target launcher stopped answering", "err", err.Error())
		st.close()
		return ctrl.Result{RequeueAfter: retryLauncher}, nil
	}
	st.setStatus(ls)
	h.watch(st)

	switch ls.State {
	case launcherapi.State_STATE_PENDING:
		if ms.Completed {
			return ctrl.Result{}, nil // the move ended elsewhere; the controller removes this pod
		}
		if _, err := h.start(ctx, vmi, st, lc, lc.client.PrepareMigrationTarget); err != nil {
			log.Error(err, "preparing the migration target; will retry")
			return ctrl.Result{RequeueAfter: retryLauncher}, nil
		}
		log.Info("migration target prepared")
		return ctrl.Result{Requeue: true}, nil
	case launcherapi.State_STATE_MIGRATING_IN:
		if ms.Completed {
			// The source finished sending; the target resumes the guest in a moment.
			return ctrl.Result{RequeueAfter: retryLauncher}, nil
		}
		return h.listenForSource(ctx, vmi, st, ms)
	case launcherapi.State_STATE_RUNNING, launcherapi.State_STATE_PAUSED:
		if !ms.Completed {
			// Post-copy: the guest already runs here while its last pages arrive.
			return h.listenForSource(ctx, vmi, st, ms)
		}
		return ctrl.Result{}, h.takeOver(ctx, vmi, st)
	default:
		// The target's QEMU ended: the source's stream breaks and its node agent reports the
		// failure; the controller removes this pod.
		log.Info("the migration target ended", "state", ls.State.String(), "message", ls.Message)
		st.dropLink()
		return ctrl.Result{}, nil
	}
}

// listenForSource opens the target's listeners once and reports where they are.
func (h *Handler) listenForSource(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState, ms *v1.VirtualMachineInstanceMigrationState) (ctrl.Result, error) {
	link := st.link(ms.MigrationUID)
	if link == nil {
		var err error
		if link, err = h.openTargetLink(ctx, st, ms); err != nil {
			return ctrl.Result{}, err
		}
		st.setLink(link)
	}
	if ms.TargetNodeAddress == h.opts.Migration.AdvertiseHost && maps.Equal(ms.TargetDirectMigrationNodePorts, link.ports) {
		return ctrl.Result{RequeueAfter: resync}, nil
	}
	return ctrl.Result{RequeueAfter: resync}, h.writeMigration(ctx, vmi, func(s *v1.VirtualMachineInstanceMigrationState) {
		s.TargetNodeAddress = h.opts.Migration.AdvertiseHost
		s.TargetDirectMigrationNodePorts = link.ports
		s.TargetNodeDomainDetected = true
	})
}

func (h *Handler) openTargetLink(ctx context.Context, st *vmState, ms *v1.VirtualMachineInstanceMigrationState) (*migrationLink, error) {
	cfg, err := h.opts.Migration.serverTLS()
	if err != nil {
		return nil, fmt.Errorf("node CA: %w", err)
	}
	link := &migrationLink{uid: ms.MigrationUID, ports: map[string]int{}}
	listen := net.JoinHostPort(h.opts.Migration.AdvertiseHost, "0")
	for _, stream := range []int{streamState, streamDisks} {
		sock := streamSockets[stream][0]
		dial := func(ctx context.Context) (net.Conn, error) { return st.dir.dial(ctx, sock) }
		t, err := migrationproxy.ListenTarget(listen, cfg, ms.SourceNode, dial, h.log.WithValues("vmi", st.key.String(), "stream", sock))
		if err != nil {
			link.close()
			return nil, fmt.Errorf("migration listener: %w", err)
		}
		link.proxies = append(link.proxies, t)
		link.ports[strconv.Itoa(t.Addr().Port)] = stream
	}
	ctrl.LoggerFrom(ctx).Info("listening for the migration", "ports", link.ports)
	return link, nil
}

// takeOver makes this node the VMI's: the guest runs here and the source reported the move
// complete.
func (h *Handler) takeOver(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState) error {
	st.dropLink()
	next := vmi.DeepCopy()
	now := metav1.Now()
	next.Status.NodeName = h.opts.NodeName
	next.Status.MigrationState.TargetNodeDomainReadyTimestamp = &now
	st.mu.Lock()
	nics := st.nics
	st.mu.Unlock()
	applyLauncherStatus(next, st.lastStatus(), nics)
	// An update, not a patch: the whole status is this node's now, written over what the cache
	// showed only if that was current.
	if err := h.client.Status().Update(ctx, next); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("the migrated VM runs on this node now")
	return nil
}

// writeMigration patches the VMI's status.migrationState with change.
func (h *Handler) writeMigration(ctx context.Context, vmi *v1.VirtualMachineInstance, change func(*v1.VirtualMachineInstanceMigrationState)) error {
	if vmi.Status.MigrationState == nil {
		return errors.New("the VMI has no migration state")
	}
	next := vmi.DeepCopy()
	change(next.Status.MigrationState)
	return h.client.Status().Patch(ctx, next, client.MergeFrom(vmi))
}

func failMigration(s *v1.VirtualMachineInstanceMigrationState, why string) {
	now := metav1.Now()
	s.Failed, s.FailureReason, s.EndTimestamp = true, why, &now
}
