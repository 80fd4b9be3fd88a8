// Package handler is virt-handler's core: for each VMI scheduled to this node it gives the
// launcher its VM (network plumbed, spec built), follows the launcher's events, reports the
// VMI's status, and serves the node API (console, VNC, port-forward, commands) to virt-api.
package handler

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// Options configure a node agent.
type Options struct {
	NodeName string
	// KubeletPodsDir is the kubelet's directory of pods (DefaultKubeletPodsDir), where each
	// launcher pod's VM directory, an emptyDir, is.
	KubeletPodsDir string
	// LauncherUID owns the sockets in a VM's directory: the uid virt-launcher and QEMU run as
	// (107, as virt-controller renders the launcher pod). A socket owned by anyone else is
	// refused.
	LauncherUID int
	Network     Network
	// UseEmulation reports whether guests run under software emulation (KubeVirt CR).
	UseEmulation func() bool
	// LauncherCallTimeout bounds a node API request's call to a launcher (commands,
	// screenshots), so that a launcher that hangs fails its own requests only.
	LauncherCallTimeout time.Duration
	// MaxPortForwardsPerVMI caps the port-forward streams open to one VMI at once; 0: no cap.
	// Console and VNC have one session each per VMI.
	MaxPortForwardsPerVMI int
	// Migration lets the agent carry live migrations; nil: a migration from or to this node fails.
	Migration *MigrationOptions
	// VhostVsockPath is the vhost-vsock device VMs with autoattachVSOCK get; empty:
	// DefaultVhostVsockPath.
	VhostVsockPath string
	// VSOCK dials into guests (the vsock subresource); nil: AF_VSOCK.
	VSOCK VSOCKDialer
	Log   logr.Logger
}

// Defaults of Options.
const (
	DefaultLauncherCallTimeout   = 20 * time.Second
	DefaultMaxPortForwardsPerVMI = 32
)

// Handler tracks the VMs on this node.
type Handler struct {
	opts   Options
	client client.Client
	log    logr.Logger

	mu     sync.Mutex
	vms    map[types.UID]*vmState
	byName map[types.NamespacedName]types.UID

	// wake re-queues a VMI when its launcher reports something.
	wake chan event.GenericEvent
}

// New returns a Handler using c for the API.
func New(c client.Client, opts Options) *Handler {
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.UseEmulation == nil {
		opts.UseEmulation = func() bool { return false }
	}
	if opts.LauncherCallTimeout <= 0 {
		opts.LauncherCallTimeout = DefaultLauncherCallTimeout
	}
	if opts.KubeletPodsDir == "" {
		opts.KubeletPodsDir = DefaultKubeletPodsDir
	}
	if opts.VhostVsockPath == "" {
		opts.VhostVsockPath = DefaultVhostVsockPath
	}
	return &Handler{opts: opts, client: c, log: opts.Log, vms: map[types.UID]*vmState{}, byName: map[types.NamespacedName]types.UID{},
		wake: make(chan event.GenericEvent, 1024)}
}

// state returns the local state of a VMI, creating it when create is set.
func (h *Handler) state(vmi *v1.VirtualMachineInstance, create bool) *vmState {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st := h.vms[vmi.UID]; st != nil || !create {
		return st
	}
	key := types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name}
	st := &vmState{key: key, uid: vmi.UID, dir: h.dirOf(vmi.Namespace, vmi.UID), sessions: map[string]closer{}}
	h.vms[vmi.UID] = st
	h.byName[key] = vmi.UID
	return st
}

// stateByName finds a VM by namespace/name, for the node API.
func (h *Handler) stateByName(ns, name string) *vmState {
	h.mu.Lock()
	defer h.mu.Unlock()
	if uid, ok := h.byName[types.NamespacedName{Namespace: ns, Name: name}]; ok {
		return h.vms[uid]
	}
	return nil
}

// forget drops a VM's local state once nothing of it remains.
func (h *Handler) forget(st *vmState) {
	st.close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.vms[st.uid] == st {
		delete(h.vms, st.uid)
	}
	if h.byName[st.key] == st.uid {
		delete(h.byName, st.key)
	}
}

// launcherCall bounds a call to a launcher made for a node API request.
func (h *Handler) launcherCall(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, h.opts.LauncherCallTimeout)
}

// requeue asks for a reconcile of key without blocking the caller.
func (h *Handler) requeue(key types.NamespacedName) {
	obj := &v1.VirtualMachineInstance{}
	obj.Namespace, obj.Name = key.Namespace, key.Name
	select {
	case h.wake <- event.GenericEvent{Object: obj}:
	case <-time.After(time.Second):
		h.log.Info("reconcile queue full; relying on the periodic resync", "vmi", key.String())
	}
}
