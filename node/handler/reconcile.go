package handler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/node/launcherspec"
)

const (
	// retryLauncher paces reconnects while a launcher pod is starting.
	retryLauncher = 500 * time.Millisecond
	// resync re-checks running VMs even without events, as a backstop.
	resync = 30 * time.Second
	// retryHotplug paces retries of a hotplug round that failed.
	retryHotplug = time.Second
	// defaultGrace is KubeVirt's terminationGracePeriodSeconds when unset.
	defaultGrace = 30 * time.Second
)

// Reconcile brings one VMI on this node toward its desired state.
func (h *Handler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vmi := &v1.VirtualMachineInstance{}
	if err := h.client.Get(ctx, req.NamespacedName, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			if st := h.stateByName(req.Namespace, req.Name); st != nil {
				h.release(st, nil)
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if vmi.Status.NodeName != h.opts.NodeName {
		if ms := h.migratingHere(vmi); ms != nil && vmi.DeletionTimestamp == nil && !isFinal(vmi) {
			log := h.log.WithValues("vmi", req.NamespacedName.String())
			return h.reconcileTarget(ctrl.LoggerInto(ctx, log), vmi, ms)
		}
		if st := h.state(vmi, false); st != nil {
			h.release(st, vmi)
		}
		return ctrl.Result{}, nil
	}
	switch vmi.Status.Phase {
	case v1.Scheduled, v1.Running, v1.Succeeded, v1.Failed:
	default:
		return ctrl.Result{}, nil // the controller still owns it
	}
	log := h.log.WithValues("vmi", req.NamespacedName.String())
	ctx = ctrl.LoggerInto(ctx, log)
	st := h.state(vmi, true)

	lc, err := st.connect()
	if err != nil {
		if isFinal(vmi) {
			h.release(st, vmi)
			return ctrl.Result{}, nil
		}
		log.V(1).Info("launcher not reachable yet", "err", err.Error())
		return ctrl.Result{RequeueAfter: retryLauncher}, nil
	}
	ls, err := lc.status(ctx)
	if err != nil {
		// The launcher is gone: its pod ends and the controller fails or cleans up the VMI.
		log.Info("launcher stopped answering", "err", err.Error())
		if last := st.lastStatus(); last.GetExitReason() == launcherapi.ExitReason_EXIT_REASON_MIGRATED {
			// It exited once its guest had moved: report the move from what it last said.
			if _, err := h.driveSource(ctx, vmi, st, lc, last); err != nil {
				return ctrl.Result{}, err
			}
		}
		st.close()
		if isFinal(vmi) {
			h.release(st, vmi)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{RequeueAfter: retryLauncher}, nil
	}
	st.setStatus(ls)
	st.mu.Lock()
	st.labels = vmi.Labels
	st.mu.Unlock()
	h.watch(st)

	switch {
	case vmi.DeletionTimestamp != nil || isFinal(vmi):
		h.stop(st, vmi, ls)
	case ls.State == launcherapi.State_STATE_PENDING && vmi.Status.Phase == v1.Scheduled:
		if ls, err = h.start(ctx, vmi, st, lc, lc.client.Sync); err != nil {
			return h.startFailed(ctx, vmi, err)
		}
		st.setStatus(ls)
	case running(ls) && st.nics == nil:
		// Adopted after a node agent restart: re-establish what lived in the old process.
		if _, err := h.plumb(ctx, vmi, st, lc); err != nil {
			log.Error(err, "re-plumbing the network of an adopted VM")
		}
	}
	again := resync
	if vmi.DeletionTimestamp == nil && !isFinal(vmi) {
		next, err := h.syncHotplug(ctx, vmi, st, lc, st.lastStatus())
		st.setStatus(next)
		if err != nil {
			// Retried soon: a guest may take its time to release a disk.
			log.Error(err, "hotplug")
			again = retryHotplug
		}
		if md := next.GetMemoryDump(); md != nil && md.State == "active" {
			again = retryHotplug // its end goes on the VMI's status
		}
	}
	if err := h.writeStatus(ctx, vmi, st); err != nil {
		return ctrl.Result{}, err
	}
	if isFinal(vmi) {
		return ctrl.Result{}, nil
	}
	if vmi.DeletionTimestamp == nil {
		// Status first: the move's own writes start from the VMI as it is now.
		if err := h.client.Get(ctx, req.NamespacedName, vmi); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		after, err := h.driveSource(ctx, vmi, st, lc, st.lastStatus())
		if err != nil {
			return ctrl.Result{}, err
		}
		if after > 0 {
			return ctrl.Result{RequeueAfter: min(after, again)}, nil
		}
	}
	return ctrl.Result{RequeueAfter: again}, nil
}

func isFinal(vmi *v1.VirtualMachineInstance) bool {
	return vmi.Status.Phase == v1.Succeeded || vmi.Status.Phase == v1.Failed
}

func running(ls *launcherapi.StatusResponse) bool {
	switch ls.GetState() {
	case launcherapi.State_STATE_STARTING, launcherapi.State_STATE_RUNNING, launcherapi.State_STATE_PAUSED, launcherapi.State_STATE_SHUTTING_DOWN:
		return true
	}
	return false
}

// startRPC is the launcher call that starts the VM from its spec: Sync, or
// PrepareMigrationTarget on a migration's target.
type startRPC func(context.Context, *launcherapi.SyncRequest, ...grpc.CallOption) (*launcherapi.StatusResponse, error)

// start plumbs the network, hands over the taps and sends the spec.
func (h *Handler) start(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState, lc *launcherConn, run startRPC) (*launcherapi.StatusResponse, error) {
	log := ctrl.LoggerFrom(ctx)
	nics, err := h.plumb(ctx, vmi, st, lc)
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	env := launcherspec.Env{UseEmulation: h.opts.UseEmulation(), NICs: map[string]launcherspec.NIC{}}
	pod, err := h.volumePod(ctx, vmi)
	if err != nil {
		return nil, err
	}
	env.Images = imagesIn(vmi, pod, lc)
	if pod != nil && launcherspec.ReadsSecrets(vmi) {
		env.SecretDirs = launcherspec.SecretDirs(pod)
	}
	if pod != nil && usesClaims(vmi) {
		env.Claims = launcherspec.ClaimDisks(pod, vmi)
	}
	taps := map[string]*os.File{}
	for name, nic := range nics {
		if nic.Tap == nil {
			return nil, fmt.Errorf("interface %s: its tap is held by another process", name)
		}
		defer nic.Tap.Close() // the launcher holds its own copy once Sync is done
		fdName := "tap-" + name
		env.NICs[name] = launcherspec.NIC{TapFDName: fdName, MAC: nic.MAC}
		taps[fdName] = nic.Tap
	}
	vsockDev, vsock, err := openVSOCK(vmi, h.opts.VhostVsockPath, h.opts.NodeName)
	if err != nil {
		return nil, err
	}
	if vsockDev != nil {
		defer vsockDev.Close()
		taps[vsockFDName] = vsockDev
		env.VSOCK = vsock
	}
	spec, err := launcherspec.Build(vmi, env)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := lc.sendTaps(taps); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	ls, err := run(sctx, &launcherapi.SyncRequest{Spec: spec})
	if err != nil {
		return nil, err
	}
	log.Info("VM started", "qemuPid", ls.QemuPid, "took", time.Since(t0).Round(time.Millisecond))
	return ls, nil
}

// plumb wires every pod-network interface; safe to repeat.
func (h *Handler) plumb(ctx context.Context, vmi *v1.VirtualMachineInstance, st *vmState, lc *launcherConn) (map[string]*PlumbedNIC, error) {
	nics := map[string]*PlumbedNIC{}
	if ifaces := podInterfaces(vmi); h.opts.Network != nil && len(ifaces) > 0 {
		pod := PodNet{NetnsPath: lc.netnsPath()}
		var err error
		if pod.DNS, err = readPodDNS("/proc", lc.pid); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "the guest's lease gets what could be read of the pod's DNS settings")
		}
		for _, in := range ifaces {
			nic, err := h.opts.Network.Setup(ctx, pod, vmi, in)
			if err != nil {
				return nil, fmt.Errorf("interface %s: %w", in.Name, err)
			}
			nics[in.Name] = nic
		}
	}
	st.mu.Lock()
	st.nics = nics
	st.mu.Unlock()
	return nics, nil
}

// startFailed reports a start that cannot succeed (a spec the node cannot run) as a failed
// VMI; anything else is retried.
func (h *Handler) startFailed(ctx context.Context, vmi *v1.VirtualMachineInstance, err error) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	if status.Code(err) != codes.InvalidArgument && !errors.Is(err, launcherspec.ErrImageNotFound) {
		log.Error(err, "starting the VM; will retry")
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	log.Error(err, "the VM cannot start on this node")
	fresh := vmi.DeepCopy()
	setPhase(fresh, v1.Failed)
	fresh.Status.Reason = "StartFailed"
	setCondition(fresh, v1.VirtualMachineInstanceReady, false, "StartFailed", err.Error())
	return ctrl.Result{}, h.client.Status().Update(ctx, fresh)
}

// stop shuts the VM down with the VMI's grace period, once.
func (h *Handler) stop(st *vmState, vmi *v1.VirtualMachineInstance, ls *launcherapi.StatusResponse) {
	if !running(ls) {
		return
	}
	st.mu.Lock()
	if st.stopping {
		st.mu.Unlock()
		return
	}
	st.stopping = true
	lc := st.lc
	st.mu.Unlock()
	grace := defaultGrace
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	log := h.log.WithValues("vmi", st.key.String(), "grace", grace)
	log.Info("shutting the VM down")
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace+time.Minute)
		defer cancel()
		if _, err := lc.client.Shutdown(ctx, &launcherapi.ShutdownRequest{GracePeriodSeconds: int64(grace / time.Second)}); err != nil {
			log.Error(err, "shutdown")
		}
		h.requeue(st.key)
	}()
}

// release forgets a VM that no longer runs here, freeing its network resources. Its
// directory is its launcher pod's, which the kubelet removes with the pod.
func (h *Handler) release(st *vmState, _ *v1.VirtualMachineInstance) {
	if h.opts.Network != nil {
		h.opts.Network.Teardown(st.uid)
	}
	h.forget(st)
}
