package podrunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

const (
	maxPodRetry = time.Minute
	// minGrace is the least time a launcher gets to stop when its pod vanished from the API
	// (a forced deletion), as a kubelet grants.
	minGrace = 2 * time.Second
	// defaultGrace applies when a pod says nothing.
	defaultGrace = 30 * time.Second
)

// worker runs one pod: one goroutine per pod, so a slow stop or a failing start of one VM never
// holds up another.
type worker struct {
	r   *Runner
	uid types.UID
	log logr.Logger

	mu   sync.Mutex
	pod  *corev1.Pod // latest from the informer
	gone bool        // deleted from the API
	kick chan struct{}

	// Owned by the run goroutine.
	sb       *sandbox
	proc     *watcher
	backoff  time.Duration
	lastWarn string
	sent     *corev1.PodStatus // the last status written and what the API returned for it
	got      *corev1.PodStatus
}

// newWorker makes the worker of an adopted sandbox, or of a pod seen for the first time.
func (r *Runner) newWorker(sb *sandbox, pod *corev1.Pod) *worker {
	w := &worker{r: r, kick: make(chan struct{}, 1), sb: sb, log: r.log, pod: pod}
	if pod != nil {
		w.uid = pod.UID
		w.log = r.log.WithValues("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "vmi", vmiName(pod))
	}
	if sb != nil {
		w.uid = sb.PodUID
		w.log = r.log.WithValues("pod", sb.Namespace+"/"+sb.Name, "podUID", sb.PodUID, "vmi", sb.VMI)
	}
	return w
}

func (w *worker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.pod = pod
	w.mu.Unlock()
	w.notify()
}

func (w *worker) markGone() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	w.notify()
}

func (w *worker) hasPod() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod != nil
}

func (w *worker) notify() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *worker) run(ctx context.Context) {
	if sb := w.sb; sb != nil && sb.Exit == nil {
		w.proc = watch(sb.Launcher)
		w.log.Info("adopted a launcher", "pid", sb.Launcher.Pid, "running", !isDone(w.proc.done))
	}
	defer func() {
		if w.proc != nil {
			w.proc.release()
		}
	}()
	for {
		finished, retryIn := w.sync(ctx)
		if finished {
			return
		}
		var retry <-chan time.Time
		if retryIn > 0 {
			retry = time.After(retryIn)
		}
		var exited <-chan struct{}
		// Once seen, an exit is handled by sync; a failure there retries after the backoff.
		if w.sb != nil && w.sb.Exit == nil && w.proc != nil && !isDone(w.proc.done) {
			exited = w.proc.done
		}
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-exited:
		case <-retry:
		}
	}
}

// sync moves the pod one step towards what the API asks; it reports whether the worker is done
// and when to try again after a failure.
func (w *worker) sync(ctx context.Context) (finished bool, retryIn time.Duration) {
	w.mu.Lock()
	pod, gone := w.pod, w.gone
	w.mu.Unlock()
	if ctx.Err() != nil {
		return true, 0
	}
	var err error
	switch {
	case gone:
		err = w.syncGone(ctx, pod)
		if err == nil {
			return true, 0
		}
	case pod == nil:
		return false, 0
	case pod.DeletionTimestamp != nil:
		err = w.syncDeleted(ctx, pod)
	case w.sb == nil:
		err = w.syncNew(ctx, pod)
	default:
		err = w.syncSandbox(ctx, pod)
	}
	if err == nil {
		w.backoff = 0
		return false, 0
	}
	if ctx.Err() != nil {
		return true, 0
	}
	var wait *waitErr
	if !errors.As(err, &wait) || wait.retry {
		if w.backoff == 0 {
			w.backoff = w.r.opts.PodRetry
		} else {
			w.backoff = min(2*w.backoff, maxPodRetry)
		}
		w.log.Error(err, "pod sync failed; retrying", "in", w.backoff)
		return false, w.backoff
	}
	w.log.Error(err, "pod cannot run")
	return false, 0
}

// waitErr is a pod that cannot start: its containers wait for reason. retry says whether
// trying again can help (an image may be added; a spec will not change).
type waitErr struct {
	waiting map[string]corev1.ContainerStateWaiting
	retry   bool
}

func (e *waitErr) Error() string {
	var parts []string
	for c, w := range e.waiting {
		parts = append(parts, fmt.Sprintf("%s: %s: %s", c, w.Reason, w.Message))
	}
	// Sorted, so an unchanged reason reads the same and is not reported again.
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// syncNew starts a pod that has no sandbox here.
func (w *worker) syncNew(ctx context.Context, pod *corev1.Pod) error {
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return nil // restartPolicy Never: a finished pod stays finished
	case pod.Status.Phase == corev1.PodRunning:
		// The API says it runs but this node has no record of it: its state was lost.
		w.log.Info("pod is running per the API but unknown on this node: reporting it failed")
		return w.writeStatus(ctx, pod, func(p *corev1.Pod) corev1.PodStatus { return lostStatus(p, w.r.opts.NodeIP, time.Now()) })
	case !isLauncherPod(pod):
		return w.wait(ctx, pod, false, "Failed", allWaiting(pod, ReasonUnsupported,
			fmt.Sprintf("the qvirt pod runner runs only pods labelled %s=%s", LauncherLabel, LauncherLabelValue)))
	}
	lp, err := parseLauncherPod(pod, w.r.opts.LauncherBinary, w.r.podDir(pod.UID))
	if err != nil {
		return w.wait(ctx, pod, false, "Failed", map[string]corev1.ContainerStateWaiting{
			ComputeContainer: {Reason: ReasonUnsupported, Message: err.Error()},
		})
	}
	ids, missing := checkImages(w.r.opts.Images, lp)
	if len(missing) > 0 {
		return w.wait(ctx, pod, true, "Failed", missing)
	}
	sb, err := w.r.startSandbox(ctx, pod, lp, ids, w.log)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return w.wait(ctx, pod, true, "FailedCreatePodSandBox", map[string]corev1.ContainerStateWaiting{
			ComputeContainer: {Reason: ReasonCreateError, Message: err.Error()},
		})
	}
	w.sb, w.proc, w.lastWarn = sb, watch(sb.Launcher), ""
	w.event(pod, corev1.EventTypeNormal, "Started", fmt.Sprintf("Started virt-launcher (pid %d, pod IP %s)", sb.Launcher.Pid, strings.Join(sb.PodIPs, ",")))
	return w.syncSandbox(ctx, pod)
}

func allWaiting(pod *corev1.Pod, reason, msg string) map[string]corev1.ContainerStateWaiting {
	m := map[string]corev1.ContainerStateWaiting{}
	for _, c := range pod.Spec.Containers {
		m[c.Name] = corev1.ContainerStateWaiting{Reason: reason, Message: msg}
	}
	return m
}

// wait reports a pod that cannot start: Pending with the waiting states, and a warning event
// when the message is new.
func (w *worker) wait(ctx context.Context, pod *corev1.Pod, retry bool, eventReason string, waiting map[string]corev1.ContainerStateWaiting) error {
	werr := &waitErr{waiting: waiting, retry: retry}
	if msg := werr.Error(); msg != w.lastWarn {
		w.lastWarn = msg
		w.event(pod, corev1.EventTypeWarning, eventReason, msg)
	}
	if err := w.writeStatus(ctx, pod, func(p *corev1.Pod) corev1.PodStatus {
		return waitingStatus(p, w.r.opts.NodeIP, waiting, time.Now())
	}); err != nil {
		return errors.Join(werr, err)
	}
	return werr
}

// syncSandbox notices the launcher's end and keeps the status true.
func (w *worker) syncSandbox(ctx context.Context, pod *corev1.Pod) error {
	if w.sb.Exit == nil && w.proc != nil && isDone(w.proc.done) {
		if err := w.collectExit(ctx, false); err != nil {
			return err
		}
	}
	if w.sb.Exit != nil && !w.sb.NetworkDown {
		if err := w.r.stopNetwork(ctx, w.sb); err != nil {
			return err
		}
		if err := w.r.saveSandbox(w.sb); err != nil {
			return err
		}
	}
	return w.writeStatus(ctx, pod, func(p *corev1.Pod) corev1.PodStatus { return runStatus(p, w.current(), time.Now()) })
}

func (w *worker) current() podRun {
	return podRun{HostIP: w.r.opts.NodeIP, PodIPs: w.sb.PodIPs, StartedAt: w.sb.StartedAt, Exit: w.sb.Exit, ImageIDs: w.sb.ImageIDs}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// collectExit records how the launcher ended and kills whatever it left in its session (QEMU
// after a launcher crash).
func (w *worker) collectExit(ctx context.Context, killed bool) error {
	code, ok := readExit(w.r.exitFile(w.sb))
	// The shim writes the status right after the launcher ends.
	for deadline := time.Now().Add(2 * time.Second); !ok && !killed && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		code, ok = readExit(w.r.exitFile(w.sb))
	}
	info := &exitInfo{Code: code, Reason: ReasonCompleted, FinishedAt: time.Now()}
	// The shim wrote the file as the launcher ended, maybe while no runner watched.
	if fi, err := os.Stat(w.r.exitFile(w.sb)); ok && err == nil {
		info.FinishedAt = fi.ModTime()
	}
	switch {
	case !ok:
		info.Code, info.Reason, info.Message = 137, ReasonError, "the launcher was killed"
	case code != 0:
		info.Reason, info.Message = ReasonError, logTail(w.sb.LogFile)
	}
	if left := killSession(w.sb.Shim.Pid); len(left) > 0 {
		return fmt.Errorf("processes %v of the pod would not die", left)
	}
	w.sb.Exit = info
	w.log.Info("launcher exited", "pid", w.sb.Launcher.Pid, "exitCode", info.Code, "reason", info.Reason,
		"ran", info.FinishedAt.Sub(w.sb.StartedAt).Round(time.Millisecond))
	return w.r.saveSandbox(w.sb)
}

// logTail is the end of the launcher's log, as a kubelet reports a failed container's message
// under terminationMessagePolicy FallbackToLogsOnError: the last 80 lines, at most 2 KiB.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 2048
	if info, err := f.Stat(); err == nil && info.Size() > max {
		f.Seek(info.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 80 {
		lines = lines[len(lines)-80:]
	}
	return strings.Join(lines, "\n")
}

// stopLauncher sends SIGTERM and, after grace, SIGKILL to the whole session. It returns early,
// leaving the launcher alone, when ctx ends (the runner stops; the next one carries on).
func (w *worker) stopLauncher(ctx context.Context, grace time.Duration) error {
	if w.sb.Exit != nil || w.proc == nil {
		return nil
	}
	killed := false
	if !isDone(w.proc.done) {
		w.log.Info("stopping the launcher", "pid", w.sb.Launcher.Pid, "grace", grace)
		if err := w.proc.signal(unix.SIGTERM); err != nil {
			w.log.Error(err, "SIGTERM to the launcher")
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-w.proc.done:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			w.log.Info("grace period over: killing the pod's processes", "grace", grace)
			killSession(w.sb.Shim.Pid)
			killed = true
			select {
			case <-w.proc.done:
			case <-time.After(5 * time.Second):
				return fmt.Errorf("launcher pid %d survived SIGKILL", w.sb.Launcher.Pid)
			}
		}
	}
	return w.collectExit(ctx, killed)
}

// syncDeleted stops the pod and deletes it for good, as a kubelet finishes a graceful deletion.
func (w *worker) syncDeleted(ctx context.Context, pod *corev1.Pod) error {
	if w.sb != nil {
		grace := defaultGrace
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		} else if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		if w.sb.Exit == nil {
			w.event(pod, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Stopping container %s", ComputeContainer))
		}
		if err := w.stopLauncher(ctx, grace); err != nil {
			return err
		}
		if err := w.r.stopNetwork(ctx, w.sb); err != nil {
			return err
		}
		// The final container states, for whoever watches the pod go.
		if err := w.writeStatus(ctx, pod, func(p *corev1.Pod) corev1.PodStatus { return runStatus(p, w.current(), time.Now()) }); err != nil && !apierrors.IsNotFound(err) {
			w.log.Error(err, "writing the final status")
		}
		if err := w.r.removeSandbox(w.sb); err != nil {
			return err
		}
		w.sb = nil
	}
	err := w.r.opts.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	switch {
	case err == nil:
		w.log.Info("pod deleted")
	case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
		return fmt.Errorf("delete pod: %w", err)
	}
	return nil
}

// syncGone cleans up after a pod the API no longer has (deleted by force, or by us).
func (w *worker) syncGone(ctx context.Context, last *corev1.Pod) error {
	if w.sb == nil {
		return nil
	}
	grace := minGrace
	if last != nil && last.DeletionGracePeriodSeconds != nil {
		grace = max(grace, time.Duration(*last.DeletionGracePeriodSeconds)*time.Second)
	}
	if err := w.stopLauncher(ctx, grace); err != nil {
		return err
	}
	if err := w.r.stopNetwork(ctx, w.sb); err != nil {
		return err
	}
	if err := w.r.removeSandbox(w.sb); err != nil {
		return err
	}
	w.log.Info("pod gone from the API: cleaned up")
	w.sb = nil
	return nil
}

// writeStatus writes the status build makes of the current pod, through the status
// subresource, when it differs from the pod's.
func (w *worker) writeStatus(ctx context.Context, pod *corev1.Pod, build func(*corev1.Pod) corev1.PodStatus) error {
	want := build(pod)
	// What the API returned for our last write also counts as equal, in case it normalises
	// something: no endless rewrites.
	if equality.Semantic.DeepEqual(want, pod.Status) ||
		w.sent != nil && equality.Semantic.DeepEqual(want, *w.sent) && equality.Semantic.DeepEqual(pod.Status, *w.got) {
		return nil
	}
	pods := w.r.opts.Client.CoreV1().Pods(pod.Namespace)
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := pod
		if !first {
			var err error
			if cur, err = pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
				return err
			}
			if cur.UID != pod.UID {
				return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
			}
			want = build(cur)
			if equality.Semantic.DeepEqual(want, cur.Status) {
				return nil
			}
		}
		first = false
		upd := cur.DeepCopy()
		upd.Status = want
		res, err := pods.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		w.sent, w.got = &want, &res.Status
		w.log.V(1).Info("pod status written", "phase", want.Phase, "podIP", want.PodIP)
		return nil
	})
}

func (w *worker) event(pod *corev1.Pod, eventType, reason, msg string) {
	w.r.recorder.Event(pod, eventType, reason, msg)
}
