package podrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qvirt/qvirt/node/images"
)

// sandbox is what the runner made for one pod: its network namespace and address, the launcher
// process and, once it has ended, how. It is saved in StateDir/pods/UID/state.json so that a
// later runner can adopt the pod.
type sandbox struct {
	PodUID    types.UID `json:"podUID"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	VMI       string    `json:"vmi,omitempty"`
	Netns     string    `json:"netns"`
	PodIPs    []string  `json:"podIPs"`
	// Shim is the session leader: every process of the pod is in its session.
	Shim      procRef           `json:"shim"`
	Launcher  procRef           `json:"launcher"`
	StartedAt time.Time         `json:"startedAt"`
	LogFile   string            `json:"logFile"`
	EmptyDirs []string          `json:"emptyDirs,omitempty"`
	ImageIDs  map[string]string `json:"imageIDs,omitempty"`
	Exit      *exitInfo         `json:"exit,omitempty"`
	// NetworkDown is set once CNI DEL ran and the namespace is gone.
	NetworkDown bool `json:"networkDown,omitempty"`
}

func (r *Runner) podDir(uid types.UID) string {
	return filepath.Join(r.opts.StateDir, "pods", string(uid))
}

func (r *Runner) saveSandbox(sb *sandbox) error {
	b, err := json.MarshalIndent(sb, "", "  ")
	if err != nil {
		return err
	}
	dir := r.podDir(sb.PodUID)
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "state.json"))
}

// loadSandboxes reads every saved sandbox. A directory without state is a start that did not
// finish; it is cleaned up.
func (r *Runner) loadSandboxes() ([]*sandbox, error) {
	ents, err := os.ReadDir(filepath.Join(r.opts.StateDir, "pods"))
	if err != nil {
		return nil, err
	}
	var out []*sandbox
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sb, err := r.loadState(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			uid := types.UID(e.Name())
			r.log.Info("removing an unfinished pod start", "podUID", uid)
			r.cleanupUnfinished(uid)
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, nil
}

func (r *Runner) loadState(uid string) (*sandbox, error) {
	b, err := os.ReadFile(filepath.Join(r.podDir(types.UID(uid)), "state.json"))
	if err != nil {
		return nil, err
	}
	sb := &sandbox{}
	if err := json.Unmarshal(b, sb); err != nil {
		return nil, fmt.Errorf("pod state %s: %w", uid, err)
	}
	return sb, nil
}

// cleanupUnfinished undoes whatever a start interrupted by a crash of the runner left: a
// launcher already started, the namespace (named after the pod) and its address.
func (r *Runner) cleanupUnfinished(uid types.UID) {
	sb := &sandbox{PodUID: uid, Netns: podNetns(uid)}
	if sid := orphanSession(filepath.Join(r.podDir(uid), "launcher.pid"), netnsPath(sb.Netns)); sid > 0 {
		r.log.Info("killing the launcher of an unfinished pod start", "podUID", uid, "session", sid)
		if left := killSession(sid); len(left) > 0 {
			r.log.Error(nil, "processes would not die", "podUID", uid, "pids", left)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := errors.Join(r.net.del(ctx, sb), deleteNetns(sb.Netns)); err != nil {
		r.log.Error(err, "cleaning up an unfinished pod start", "podUID", uid)
		return
	}
	os.RemoveAll(r.podDir(uid))
}

func podNetns(uid types.UID) string { return "qvpod-" + string(uid) }

// startSandbox runs the named phases that start a pod, undoing the finished ones when a later
// one fails. It returns the saved sandbox.
func (r *Runner) startSandbox(ctx context.Context, pod *corev1.Pod, lp *launcherPod, imageIDs map[string]string, log logr.Logger) (sb *sandbox, err error) {
	sb = &sandbox{
		PodUID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, VMI: vmiName(pod),
		Netns: podNetns(pod.UID), LogFile: lp.logFile, EmptyDirs: lp.emptyDirs, ImageIDs: imageIDs,
	}
	dir := r.podDir(pod.UID)
	var undo []func() error
	defer func() {
		if err == nil {
			return
		}
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				err = errors.Join(err, uerr)
			}
		}
	}()
	began := time.Now()
	phase := func(name string, fn func() error) error {
		t := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		log.V(1).Info("start phase done", "phase", name, "elapsed", time.Since(t).Round(time.Microsecond))
		return nil
	}
	// A background context: undoing must not be cut short by the runner stopping.
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	}

	if err := phase("dirs", func() error {
		for _, d := range append(append([]string{dir}, lp.hostDirs...), lp.emptyDirs...) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		undo = append(undo, func() error { return os.RemoveAll(dir) })
		return nil
	}); err != nil {
		return nil, err
	}
	if err := phase("netns", func() error {
		if netnsExists(sb.Netns) {
			// Left by an interrupted start: begin afresh.
			c, cancel := cleanupCtx()
			defer cancel()
			if err := errors.Join(r.net.del(c, sb), deleteNetns(sb.Netns)); err != nil {
				return err
			}
		}
		if _, err := createNetns(sb.Netns); err != nil {
			return err
		}
		undo = append(undo, func() error { return deleteNetns(sb.Netns) })
		return nil
	}); err != nil {
		return nil, err
	}
	if err := phase("cni", func() error {
		ips, err := r.net.add(ctx, sb)
		// DEL also after a failed ADD: the plugins may have done part of the work.
		undo = append(undo, func() error {
			c, cancel := cleanupCtx()
			defer cancel()
			return r.net.del(c, sb)
		})
		sb.PodIPs = ips
		return err
	}); err != nil {
		return nil, err
	}
	if err := phase("launcher", func() error {
		sb.StartedAt = time.Now()
		shim, launcher, err := startShim(launch{
			Argv: lp.argv, Env: lp.env, Dir: lp.workDir, Netns: netnsPath(sb.Netns),
			LogFile: lp.logFile, PidFile: filepath.Join(dir, "launcher.pid"), ExitFile: r.exitFile(sb),
		})
		if err != nil {
			return err
		}
		sb.Shim, sb.Launcher = shim, launcher
		undo = append(undo, func() error {
			if left := killSession(shim.Pid); len(left) > 0 {
				return fmt.Errorf("processes %v would not die", left)
			}
			return nil
		})
		return nil
	}); err != nil {
		return nil, err
	}
	if err := phase("state", func() error { return r.saveSandbox(sb) }); err != nil {
		return nil, err
	}
	log.Info("launcher started", "pid", sb.Launcher.Pid, "podIPs", sb.PodIPs, "netns", sb.Netns,
		"log", sb.LogFile, "elapsed", time.Since(began).Round(time.Millisecond))
	return sb, nil
}

func (r *Runner) exitFile(sb *sandbox) string {
	return filepath.Join(r.podDir(sb.PodUID), "launcher.exit")
}

// stopNetwork detaches the pod and deletes its namespace, once.
func (r *Runner) stopNetwork(ctx context.Context, sb *sandbox) error {
	if sb.NetworkDown {
		return nil
	}
	if err := r.net.del(ctx, sb); err != nil {
		return err
	}
	if err := deleteNetns(sb.Netns); err != nil {
		return err
	}
	sb.NetworkDown = true
	return nil
}

// removeSandbox forgets the pod: its state and emptyDir volumes. Host paths and the launcher log
// in them stay, as under a kubelet.
func (r *Runner) removeSandbox(sb *sandbox) error {
	return os.RemoveAll(r.podDir(sb.PodUID))
}

// checkImages returns the VM images' IDs by container name, and for each image the store lacks,
// the waiting state to report.
func checkImages(store *images.Store, lp *launcherPod) (ids map[string]string, missing map[string]corev1.ContainerStateWaiting) {
	ids = map[string]string{}
	missing = map[string]corev1.ContainerStateWaiting{}
	for name, ref := range lp.images {
		var digest string
		err := errors.New("no image store")
		if store != nil {
			digest, err = store.Digest(ref)
		}
		if err != nil {
			dir := "(none)"
			if store != nil {
				dir = store.Dir()
			}
			missing[name] = corev1.ContainerStateWaiting{
				Reason:  ReasonErrImagePull,
				Message: fmt.Sprintf("image %q is not in the node's image store %s: %v", ref, dir, err),
			}
			continue
		}
		ids[name] = imageID(ref, digest)
	}
	return ids, missing
}

// imageID is repository@digest, as a kubelet reports a container's image.
func imageID(ref, digest string) string {
	r, err := name.ParseReference(ref)
	if err != nil {
		return digest
	}
	return r.Context().String() + "@" + digest
}

// orphanSession returns the session of the launcher named in pidFile if it still runs in the
// network namespace at netns: only then is the pid known to be that launcher.
func orphanSession(pidFile, netns string) int {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0
	}
	want, err := netnsInode(netns)
	if err != nil {
		return 0
	}
	if got, err := netnsInode(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil || got != want {
		return 0
	}
	st, err := readStat(pid)
	if err != nil || st.session <= 1 {
		return 0
	}
	return st.session
}
