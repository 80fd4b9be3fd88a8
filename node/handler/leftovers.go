package handler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/launcher/server"
	"github.com/qvirt/qvirt/node/safepath"
)

// DirSweeper removes the directories of VMs that are gone from this node: a VM's directory
// holds its cloud-init ISO (user data included), blank disks, logs and sockets, and nothing
// else deletes it. It sweeps when started (a node agent restart finds the directories of VMs
// that went meanwhile), when the handler lets a VM go, and on an interval as a backstop.
type DirSweeper struct {
	H *Handler
	// Reader reads pods and VMIs from the API server itself: a decision to delete must not be
	// taken from a cache that has not seen a new pod yet.
	Reader client.Reader
	// Interval between backstop sweeps; 0 means five minutes.
	Interval time.Duration
}

// sweepSpacing keeps a burst of VMI deletions from turning into a burst of sweeps.
const sweepSpacing = 2 * time.Second

// Start sweeps until ctx ends (it is a controller-runtime Runnable).
func (s DirSweeper) Start(ctx context.Context) error {
	interval := s.Interval
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.H.sweepDirs(ctx, s.Reader); err != nil && ctx.Err() == nil {
			s.H.log.Error(err, "sweeping the directories of VMs gone from this node")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.H.sweep:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(sweepSpacing):
		}
	}
}

// sweepSoon asks for a sweep without waiting for it.
func (h *Handler) sweepSoon() {
	select {
	case h.sweep <- struct{}{}:
	default:
	}
}

// sweepDirs removes every VM directory that no VM on this node needs any more: no launcher
// pod of its VMI is still running here, no launcher answers on its socket, and its VMI is
// gone or no longer on this node. A VMI that ended here keeps its directory (logs for
// diagnosis) until it is deleted, as its launcher pod stays until then.
func (h *Handler) sweepDirs(ctx context.Context, r client.Reader) error {
	ents, err := os.ReadDir(h.opts.VMDirRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var candidates []string
	h.mu.Lock()
	for _, e := range ents {
		// Only directories named by a VMI's UID are VM directories; anything else is left alone.
		if _, err := uuid.Parse(e.Name()); err != nil || !e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		if _, tracked := h.vms[types.UID(e.Name())]; !tracked {
			candidates = append(candidates, e.Name())
		}
	}
	h.mu.Unlock()
	if len(candidates) == 0 {
		return nil
	}
	// Listed after the directory was read: a directory seen there belongs to a pod that
	// existed by then, so this list has it unless it is gone.
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.MatchingFields{"spec.nodeName": h.opts.NodeName},
		client.MatchingLabels{v1.AppLabel: v1.VirtLauncherAppLabelValue}); err != nil {
		return fmt.Errorf("launcher pods on this node: %w", err)
	}
	byUID := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		uid := p.Labels[v1.CreatedByLabel]
		byUID[uid] = append(byUID[uid], p)
	}
	var errs []error
	for _, name := range candidates {
		keep, why, err := h.dirNeeded(ctx, r, name, byUID[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("VM directory %s: %w", name, err))
			continue
		}
		if keep {
			h.log.V(1).Info("VM directory kept", "uid", name, "because", why)
			continue
		}
		h.mu.Lock()
		_, tracked := h.vms[types.UID(name)]
		h.mu.Unlock()
		if tracked {
			continue // adopted meanwhile
		}
		if err := safepath.RemoveAll(h.opts.VMDirRoot, name); err != nil {
			errs = append(errs, fmt.Errorf("removing VM directory %s: %w", name, err))
			continue
		}
		h.log.Info("removed the directory of a VM gone from this node", "uid", name, "because", why)
	}
	return errors.Join(errs...)
}

// dirNeeded tells whether the directory of the VMI with this UID must stay, and why.
func (h *Handler) dirNeeded(ctx context.Context, r client.Reader, uid string, pods []*corev1.Pod) (bool, string, error) {
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true, "its launcher pod " + p.Name + " has not ended", nil
		}
	}
	// A pod deleted without waiting for its containers may leave a launcher running.
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	c, err := h.dirOf(uid).dial(dctx, server.SocketName)
	cancel()
	if err == nil {
		c.Close()
		return true, "a launcher answers on its socket", nil
	}
	if len(pods) == 0 {
		return false, "no launcher pod of it is left on this node", nil
	}
	p := pods[0]
	name := p.Labels[vmiNameLabel]
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "VirtualMachineInstance" {
		name = ref.Name
	}
	vmi := &v1.VirtualMachineInstance{}
	err = r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, vmi)
	switch {
	case apierrors.IsNotFound(err):
		return false, "its VMI is deleted", nil
	case err != nil:
		return false, "", fmt.Errorf("its VMI: %w", err)
	case string(vmi.UID) != uid:
		return false, "its VMI is deleted (another has its name)", nil
	case vmi.Status.NodeName != "" && vmi.Status.NodeName != h.opts.NodeName:
		return false, "its VMI moved to node " + vmi.Status.NodeName, nil
	}
	return true, "its VMI still exists (the logs stay until it is deleted)", nil
}
