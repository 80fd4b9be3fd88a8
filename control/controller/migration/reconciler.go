// Package migration is the migration controller: it admits migrations within
// the concurrency limits, creates the target launcher pod on another node,
// and once that runs hands the move to the node agents through the VMI's
// status.migrationState, following their reports to Succeeded or Failed.
package migration

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

// Failure reasons, in status.migrationState.failureReason and Events.
const (
	ReasonVMINotFound      = "VMINotFound"
	ReasonVMINotRunning    = "VMINotRunning"
	ReasonTargetPodMissing = "TargetPodMissing"
	ReasonTargetPodFailed  = "TargetPodFailed"
	ReasonUnschedulable    = "TargetPodUnschedulable"
	ReasonFailedCreate     = "FailedCreate"
)

const (
	// pendingRecheck is how often a migration waiting for a slot looks again.
	pendingRecheck = 5 * time.Second
	// DefaultUnschedulableTimeout is how long a target pod may stay
	// unschedulable before the migration fails (KubeVirt's default).
	DefaultUnschedulableTimeout = 5 * time.Minute
	conflictRetry               = 200 * time.Millisecond
)

// Reconciler reconciles VirtualMachineInstanceMigrations. It must run with a
// single worker: admission counts in-flight migrations and would overshoot the
// limits if two rounds admitted at once.
type Reconciler struct {
	Client client.Client
	// APIReader lists migrations uncached for admission and confirms missing pods.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Pods      launcherpod.Options
	Limits    Limits
	// UnschedulableTimeout fails a migration whose target cannot be placed;
	// DefaultUnschedulableTimeout when zero.
	UnschedulableTimeout time.Duration
	Now                  func() time.Time
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile runs one round for one migration.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mig := &virtv1.VirtualMachineInstanceMigration{}
	err := r.Client.Get(ctx, req.NamespacedName, mig)
	if apierrors.IsNotFound(err) {
		// Deleted without our finalizer (it was never reconciled): its target
		// pod, if any, still has to go.
		return ctrl.Result{}, r.deleteTargetPodsByName(ctx, req.Namespace, req.Name)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.reconcile(ctx, mig.DeepCopy())
	if apierrors.IsConflict(err) {
		log.FromContext(ctx).V(1).Info("Lost a write race, retrying", "reason", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration) (ctrl.Result, error) {
	pods, err := r.targetPods(ctx, r.Client, mig)
	if err != nil {
		return ctrl.Result{}, err
	}
	if mig.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalize(ctx, mig, pods)
	}
	if err := vmiutil.AddFinalizer(ctx, r.Client, mig, virtv1.VirtualMachineInstanceMigrationFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	if IsFinal(mig) {
		if mig.Status.Phase == virtv1.MigrationFailed {
			return ctrl.Result{}, r.deletePods(ctx, mig, pods)
		}
		return ctrl.Result{}, nil
	}

	vmi := &virtv1.VirtualMachineInstance{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: mig.Namespace, Name: mig.Spec.VMIName}, vmi)
	switch {
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, r.fail(ctx, mig, pods, ReasonVMINotFound, fmt.Sprintf("VMI %s does not exist", mig.Spec.VMIName))
	case err != nil:
		return ctrl.Result{}, err
	case vmi.DeletionTimestamp != nil || !vmiutil.IsRunning(vmi) || vmi.Status.NodeName == "":
		return ctrl.Result{}, r.fail(ctx, mig, pods, ReasonVMINotRunning, fmt.Sprintf("VMI %s is not running (phase %q)", vmi.Name, vmi.Status.Phase))
	}

	switch mig.Status.Phase {
	case virtv1.MigrationPhaseUnset, virtv1.MigrationPending:
		return r.admit(ctx, mig, vmi)
	case virtv1.MigrationScheduling:
		return r.followScheduling(ctx, mig, pods)
	case virtv1.MigrationScheduled, virtv1.MigrationPreparingTarget, virtv1.MigrationTargetReady, virtv1.MigrationRunning:
		return r.handOver(ctx, mig, vmi, pods)
	}
	return ctrl.Result{}, nil
}

// admit moves a pending migration to Scheduling, creating its target pod,
// when the limits allow it.
func (r *Reconciler) admit(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	node := vmi.Status.NodeName
	var all virtv1.VirtualMachineInstanceMigrationList
	if err := r.APIReader.List(ctx, &all); err != nil {
		return ctrl.Result{}, err
	}
	if ok, why := Admit(mig, node, all.Items, r.Limits); !ok {
		if mig.Status.Phase == virtv1.MigrationPhaseUnset {
			if err := r.setPhase(ctx, mig, virtv1.MigrationPending, nil); err != nil {
				return ctrl.Result{}, err
			}
		}
		logger.V(1).Info("Migration waits for a slot", "vmi", vmi.Name, "why", why)
		return ctrl.Result{RequeueAfter: pendingRecheck}, nil
	}

	opts, err := vmiutil.PodOptions(ctx, r.Client, r.Pods)
	if err != nil {
		return ctrl.Result{}, err
	}
	if opts.Claims, err = vmiutil.Claims(ctx, r.APIReader, vmi); err != nil {
		return ctrl.Result{}, r.fail(ctx, mig, nil, ReasonFailedCreate, fmt.Sprintf("the VMI's claims: %v", err))
	}
	pod, err := launcherpod.RenderMigrationTargetPod(vmi, mig, node, opts)
	if err != nil {
		return ctrl.Result{}, r.fail(ctx, mig, nil, ReasonFailedCreate, fmt.Sprintf("cannot render the target pod: %v", err))
	}
	err = r.Client.Create(ctx, pod)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		r.Recorder.Eventf(mig, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error creating target pod: %v", err)
		return ctrl.Result{}, fmt.Errorf("creating target pod: %w", err)
	}
	if err == nil {
		logger.Info("Created migration target pod", "vmi", vmi.Name, "pod", pod.Name, "sourceNode", node)
		r.Recorder.Eventf(mig, pod, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created migration target pod %s", pod.Name)
	}
	// The source is the pod the VMI runs in now: after an earlier migration, that one's target.
	source := launcherpod.PodName(vmi.Name, vmi.UID)
	if live, err := vmiutil.ListLauncherPods(ctx, r.Client, vmi.Namespace, string(vmi.UID)); err == nil {
		if p := vmiutil.ActivePod(vmi, live, source); p != nil {
			source = p.Name
		}
	}
	state := &virtv1.VirtualMachineInstanceMigrationState{
		MigrationUID: mig.UID,
		SourceNode:   node,
		SourcePod:    source,
		TargetPod:    pod.Name,
	}
	return ctrl.Result{}, r.setPhase(ctx, mig, virtv1.MigrationScheduling, state)
}

// followScheduling waits for the target pod to run.
func (r *Reconciler) followScheduling(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, pods []corev1.Pod) (ctrl.Result, error) {
	pod, err := r.livePod(ctx, mig, pods)
	if pod == nil || err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case vmiutil.PodReady(pod):
		state := mig.Status.MigrationState.DeepCopy()
		if state == nil {
			state = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: mig.UID}
		}
		state.TargetNode = pod.Spec.NodeName
		state.TargetPod = pod.Name
		log.FromContext(ctx).Info("Migration target pod is running", "vmi", mig.Spec.VMIName, "pod", pod.Name, "targetNode", pod.Spec.NodeName)
		return ctrl.Result{}, r.setPhase(ctx, mig, virtv1.MigrationScheduled, state)
	}
	if c := vmiutil.PodCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		timeout := r.UnschedulableTimeout
		if timeout <= 0 {
			timeout = DefaultUnschedulableTimeout
		}
		left := c.LastTransitionTime.Add(timeout).Sub(r.now())
		if left <= 0 {
			return ctrl.Result{}, r.fail(ctx, mig, pods, ReasonUnschedulable, fmt.Sprintf("target pod %s stayed unschedulable for %s: %s", pod.Name, timeout, c.Message))
		}
		return ctrl.Result{RequeueAfter: left}, nil
	}
	return ctrl.Result{}, nil
}

// fail ends the migration and removes its target pod.
func (r *Reconciler) fail(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, pods []corev1.Pod, reason, msg string) error {
	log.FromContext(ctx).Info("Migration failed", "vmi", mig.Spec.VMIName, "reason", reason, "message", msg)
	r.Recorder.Eventf(mig, nil, corev1.EventTypeWarning, reason, "Migrate", msg)
	state := mig.Status.MigrationState.DeepCopy()
	if state == nil {
		state = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: mig.UID}
	}
	state.Failed = true
	state.FailureReason = msg
	end := metav1.NewTime(r.now())
	state.EndTimestamp = &end
	if err := r.abandonVMIState(ctx, mig, msg, false); err != nil {
		return err
	}
	if err := r.setPhase(ctx, mig, virtv1.MigrationFailed, state); err != nil {
		return err
	}
	return r.deletePods(ctx, mig, pods)
}

// finalize deletes the target pod of a cancelled migration before letting the
// migration object go.
func (r *Reconciler) finalize(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, pods []corev1.Pod) error {
	if mig.Status.Phase == virtv1.MigrationSucceeded {
		// The target pod runs the VMI now: it is no longer the migration's to delete.
		return client.IgnoreNotFound(vmiutil.RemoveFinalizers(ctx, r.Client, mig, virtv1.VirtualMachineInstanceMigrationFinalizer))
	}
	if err := r.abandonVMIState(ctx, mig, "the migration was cancelled", true); err != nil {
		return err
	}
	if len(pods) == 0 {
		live, err := r.targetPods(ctx, r.APIReader, mig)
		if err != nil {
			return err
		}
		pods = live
	}
	if err := r.deletePods(ctx, mig, pods); err != nil {
		return err
	}
	if len(pods) > 0 {
		// Pod deletions trigger the next round.
		return nil
	}
	return client.IgnoreNotFound(vmiutil.RemoveFinalizers(ctx, r.Client, mig, virtv1.VirtualMachineInstanceMigrationFinalizer))
}

func (r *Reconciler) deletePods(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, pods []corev1.Pod) error {
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		uid := pod.UID
		if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			r.Recorder.Eventf(mig, pod, corev1.EventTypeWarning, "FailedDelete", "DeletePod", "Error deleting target pod %s: %v", pod.Name, err)
			return fmt.Errorf("deleting target pod %s: %w", pod.Name, err)
		}
		log.FromContext(ctx).Info("Deleted migration target pod", "vmi", mig.Spec.VMIName, "pod", pod.Name)
	}
	return nil
}

// deleteTargetPodsByName removes target pods of a migration that no longer
// exists, found by the name annotation since its UID is unknown.
func (r *Reconciler) deleteTargetPodsByName(ctx context.Context, namespace, name string) error {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.HasLabels{virtv1.MigrationJobLabel}); err != nil {
		return err
	}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Annotations[launcherpod.MigrationJobNameAnnotation] != name || pod.DeletionTimestamp != nil {
			continue
		}
		uid := pod.UID
		if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return err
		}
		log.FromContext(ctx).Info("Deleted target pod of a deleted migration", "pod", pod.Name)
	}
	return nil
}

func (r *Reconciler) targetPods(ctx context.Context, reader client.Reader, mig *virtv1.VirtualMachineInstanceMigration) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := reader.List(ctx, &list, client.InNamespace(mig.Namespace), client.MatchingLabels{
		virtv1.AppLabel:          virtv1.VirtLauncherAppLabelValue,
		virtv1.MigrationJobLabel: string(mig.UID),
	})
	return list.Items, err
}

// livePod returns the migration's target pod, or fails the migration (and returns nil) when
// the pod is gone or going.
func (r *Reconciler) livePod(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, pods []corev1.Pod) (*corev1.Pod, error) {
	pod := firstPod(pods)
	if pod == nil {
		var err error
		if pod, err = r.confirmPod(ctx, mig); err != nil {
			return nil, err
		}
	}
	switch {
	case pod == nil:
		return nil, r.fail(ctx, mig, pods, ReasonTargetPodMissing, "the target pod disappeared")
	case vmiutil.PodDownOrGoingDown(pod):
		return nil, r.fail(ctx, mig, pods, ReasonTargetPodFailed, fmt.Sprintf("target pod %s stopped", pod.Name))
	}
	return pod, nil
}

// confirmPod looks for the target pod past the cache, which may not show a pod
// created moments ago.
func (r *Reconciler) confirmPod(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration) (*corev1.Pod, error) {
	pods, err := r.targetPods(ctx, r.APIReader, mig)
	if err != nil {
		return nil, err
	}
	return firstPod(pods), nil
}

func firstPod(pods []corev1.Pod) *corev1.Pod {
	if len(pods) == 0 {
		return nil
	}
	return &pods[0]
}

// setPhase writes phase (and state, when given) with a transition timestamp.
func (r *Reconciler) setPhase(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, phase virtv1.VirtualMachineInstanceMigrationPhase, state *virtv1.VirtualMachineInstanceMigrationState) error {
	orig := mig.DeepCopy()
	if state != nil {
		mig.Status.MigrationState = state
	}
	if mig.Status.Phase != phase {
		mig.Status.Phase = phase
		mig.Status.PhaseTransitionTimestamps = append(mig.Status.PhaseTransitionTimestamps, virtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{
			Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(r.now()),
		})
	}
	if equality.Semantic.DeepEqual(orig.Status, mig.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, mig, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	if orig.Status.Phase != phase {
		log.FromContext(ctx).Info("Migration phase changed", "vmi", mig.Spec.VMIName, "from", orig.Status.Phase, "to", phase)
	}
	return nil
}
