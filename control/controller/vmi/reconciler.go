// Package vmi is the VMI controller: it creates the launcher pod of each VMI,
// follows the pod to move the VMI through Pending, Scheduling and Scheduled
// (the node agent takes over from there), fails the VMI when its launcher is
// lost, and deletes the pod before letting a deleted VMI go.
package vmi

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

// conflictRetry is how soon a reconcile that lost a write race runs again.
const conflictRetry = 200 * time.Millisecond

// Reconciler reconciles VirtualMachineInstances.
type Reconciler struct {
	// Client reads from the cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server; it confirms what the cache may not
	// show yet (a pod created moments ago) before acting on its absence.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Pods are the launcher pod options.
	Pods launcherpod.Options
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// CIDs gives VMIs with autoattachVSOCK their context IDs.
	CIDs CIDs
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile brings one VMI one step closer to its desired state.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vmi := &virtv1.VirtualMachineInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, vmi); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	res, err := r.reconcile(ctx, vmi.DeepCopy())
	if apierrors.IsConflict(err) {
		log.FromContext(ctx).V(1).Info("Lost a write race, retrying", "reason", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (ctrl.Result, error) {
	pods, err := vmiutil.ListLauncherPods(ctx, r.Client, vmi.Namespace, string(vmi.UID))
	if err != nil {
		return ctrl.Result{}, err
	}
	if vmi.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalize(ctx, vmi, pods)
	}
	if err := vmiutil.AddFinalizer(ctx, r.Client, vmi, virtv1.VirtualMachineInstanceFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	if vmiutil.IsFinal(vmi) {
		return ctrl.Result{}, r.cleanupFinal(ctx, vmi, pods)
	}

	if vmi.Spec.Domain.Devices.WantsVSOCK() && vmi.Status.VSOCKCID == nil {
		// Recorded before any pod runs the VM, which the node agent starts with it.
		cid, err := r.CIDs.Allocate(ctx, r.Client, vmi)
		if err != nil {
			return ctrl.Result{}, err
		}
		orig := vmi.DeepCopy()
		vmi.Status.VSOCKCID = &cid
		if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, err
		}
		log.FromContext(ctx).Info("VSOCK context ID assigned", "cid", cid)
	}

	pod := launcherPod(vmi, pods)
	var fail *syncFailure
	var createErr error
	if pod == nil {
		pod, fail, createErr = r.findOrCreatePod(ctx, vmi)
		if pod != nil && !containsPod(pods, pod) {
			pods = append(pods, *pod)
		}
	}
	if err := r.writeStatus(ctx, vmi, pod, pods, fail); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.syncHotplug(ctx, vmi, pod); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.deleteEndedPods(ctx, vmi, pod, pods); err != nil {
		return ctrl.Result{}, err
	}
	// A failed create is retried with the queue's backoff.
	return ctrl.Result{}, createErr
}

// deleteEndedPods deletes the VMI's pods that ended and no longer run it: the source pod of a
// completed migration, a target pod whose migration failed.
func (r *Reconciler) deleteEndedPods(ctx context.Context, vmi *virtv1.VirtualMachineInstance, active *corev1.Pod, pods []corev1.Pod) error {
	var ended []corev1.Pod
	for i := range pods {
		p := &pods[i]
		if vmiutil.PodDone(p) && p.DeletionTimestamp == nil && (active == nil || p.UID != active.UID) {
			ended = append(ended, *p)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	_, err := r.deletePods(ctx, vmi, ended)
	return err
}

// findOrCreatePod returns the VMI's launcher pod, creating it while the VMI
// has none yet. A pod missing later on is never recreated: the VMI fails.
func (r *Reconciler) findOrCreatePod(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (*corev1.Pod, *syncFailure, error) {
	logger := log.FromContext(ctx)
	// The cache may lag behind a pod created moments ago, maybe by a previous
	// instance of this controller.
	live, err := vmiutil.ListLauncherPods(ctx, r.APIReader, vmi.Namespace, string(vmi.UID))
	if err != nil {
		return nil, nil, err
	}
	if p := launcherPod(vmi, live); p != nil {
		return p, nil, nil
	}
	if !vmiutil.IsUnprocessed(vmi) {
		return nil, nil, nil
	}

	opts, err := vmiutil.PodOptions(ctx, r.Client, r.Pods)
	if err != nil {
		return nil, nil, err
	}
	claims, fail, err := lookupClaims(ctx, r.APIReader, vmi)
	if err != nil {
		return nil, fail, err
	}
	opts.Claims = claims
	if len(claims) > 0 {
		// Recorded before the pod exists: the node agent reads the claims' sizes from it.
		orig := vmi.DeepCopy()
		vmi.Status.VolumeStatus = withClaimStatus(vmi, claims)
		if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, nil, err
		}
	}
	pod, err := launcherpod.RenderLauncherPod(vmi, opts)
	if err != nil {
		// Rendering only fails on a spec the webhook should have refused; retrying
		// cannot help until the VMI changes.
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Cannot render the launcher pod: %v", err)
		return nil, &syncFailure{Reason: ReasonFailedCreate, Message: err.Error()}, nil
	}
	err = r.Client.Create(ctx, pod)
	switch {
	case apierrors.IsAlreadyExists(err):
		existing := &corev1.Pod{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), existing); err != nil {
			return nil, nil, err
		}
		if !metav1.IsControlledBy(existing, vmi) {
			msg := fmt.Sprintf("pod %s exists and does not belong to this VMI", pod.Name)
			r.Recorder.Eventf(vmi, existing, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", msg)
			return nil, &syncFailure{Reason: ReasonFailedCreate, Message: msg}, nil
		}
		return existing, nil, nil
	case err != nil:
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error creating pod: %v", err)
		return nil, &syncFailure{Reason: ReasonFailedCreate, Message: err.Error()}, fmt.Errorf("creating launcher pod: %w", err)
	}
	logger.Info("Created launcher pod", "pod", pod.Name)
	r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created virtual machine pod %s", pod.Name)
	return pod, nil, nil
}

// finalize deletes every pod of a deleted VMI, giving the guest its grace
// period, and lets the VMI go once they are all gone.
func (r *Reconciler) finalize(ctx context.Context, vmi *virtv1.VirtualMachineInstance, pods []corev1.Pod) error {
	remaining, err := r.deletePods(ctx, vmi, pods)
	if err != nil {
		return err
	}
	if err := r.writeStatus(ctx, vmi, launcherPod(vmi, remaining), remaining, nil); err != nil {
		return err
	}
	if len(remaining) > 0 {
		// Pod deletions trigger the next round.
		return nil
	}
	return r.releaseFinalizers(ctx, vmi)
}

// cleanupFinal deletes the pods of a VMI that finished and drops the
// finalizer once they are gone; the VMI object stays for its owner to see.
func (r *Reconciler) cleanupFinal(ctx context.Context, vmi *virtv1.VirtualMachineInstance, pods []corev1.Pod) error {
	remaining, err := r.deletePods(ctx, vmi, pods)
	if err != nil {
		return err
	}
	if err := r.writeStatus(ctx, vmi, nil, remaining, nil); err != nil {
		return err
	}
	// Attachment pods go with the VM.
	if err := r.syncHotplug(ctx, vmi, nil); err != nil {
		return err
	}
	if len(remaining) > 0 {
		return nil
	}
	return r.releaseFinalizers(ctx, vmi)
}

// deletePods deletes the given pods (confirming with the API server when the
// cache shows none) and returns those that still exist.
func (r *Reconciler) deletePods(ctx context.Context, vmi *virtv1.VirtualMachineInstance, pods []corev1.Pod) ([]corev1.Pod, error) {
	if len(pods) == 0 {
		live, err := vmiutil.ListLauncherPods(ctx, r.APIReader, vmi.Namespace, string(vmi.UID))
		if err != nil {
			return nil, err
		}
		pods = live
	}
	grace := launcherpod.GracePeriodSeconds(vmi)
	var remaining []corev1.Pod
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp == nil {
			uid := pod.UID
			err := r.Client.Delete(ctx, pod, client.GracePeriodSeconds(grace), client.Preconditions{UID: &uid})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				r.Recorder.Eventf(vmi, pod, corev1.EventTypeWarning, ReasonFailedDelete, "DeletePod", "Error deleting pod %s: %v", pod.Name, err)
				return nil, fmt.Errorf("deleting pod %s: %w", pod.Name, err)
			}
			log.FromContext(ctx).Info("Deleting launcher pod", "pod", pod.Name, "gracePeriodSeconds", grace)
			r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, "SuccessfulDelete", "DeletePod", "Deleted virtual machine pod %s", pod.Name)
		}
		remaining = append(remaining, *pod)
	}
	return remaining, nil
}

// releaseFinalizers drops this controller's finalizer and, when the owning VM
// is gone (so its controller never will), the VM controller's too.
func (r *Reconciler) releaseFinalizers(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	drop := []string{virtv1.VirtualMachineInstanceFinalizer}
	if controllerutil.ContainsFinalizer(vmi, virtv1.VirtualMachineControllerFinalizer) {
		gone, err := r.ownerVMGone(ctx, vmi)
		if err != nil {
			return err
		}
		if gone {
			drop = append(drop, virtv1.VirtualMachineControllerFinalizer)
		}
	}
	err := vmiutil.RemoveFinalizers(ctx, r.Client, vmi, drop...)
	if err == nil {
		log.FromContext(ctx).V(1).Info("All launcher pods are gone, released the VMI", "finalizers", vmi.Finalizers)
	}
	return client.IgnoreNotFound(err)
}

func (r *Reconciler) ownerVMGone(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (bool, error) {
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.Kind != virtv1.VirtualMachineGroupVersionKind.Kind {
		return true, nil
	}
	vm := &virtv1.VirtualMachine{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: ref.Name}, vm)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return vm.UID != ref.UID, nil
}

// writeStatus writes the VMI's new status (and node label) when it changed.
func (r *Reconciler) writeStatus(ctx context.Context, vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod, pods []corev1.Pod, fail *syncFailure) error {
	logger := log.FromContext(ctx)
	now := metav1.NewTime(r.now())
	st := desiredStatus(vmi, pod, pods, fail, now)

	// Node agents select their VMIs by this label, so it is in place before the
	// phase tells them to take over; it follows the VMI to a migration's target.
	if (st.Phase == virtv1.Scheduled || st.Phase == virtv1.Running) && st.NodeName != "" && vmi.Labels[virtv1.NodeNameLabel] != st.NodeName {
		orig := vmi.DeepCopy()
		if vmi.Labels == nil {
			vmi.Labels = map[string]string{}
		}
		vmi.Labels[virtv1.NodeNameLabel] = st.NodeName
		if err := r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
	}

	if equality.Semantic.DeepEqual(st, vmi.Status) {
		return nil
	}
	orig := vmi.DeepCopy()
	vmi.Status = st
	if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	if st.Phase != orig.Status.Phase {
		logger.Info("VMI phase changed", "from", orig.Status.Phase, "to", st.Phase, "node", st.NodeName, "reason", st.Reason)
		// A deleted VMI ending is expected, not worth a warning.
		if st.Phase == virtv1.Failed && vmi.DeletionTimestamp == nil {
			var related runtime.Object // a nil *Pod would not be a nil interface
			if pod != nil {
				related = pod
			}
			r.Recorder.Eventf(vmi, related, corev1.EventTypeWarning, st.Reason, "Fail", "The VMI failed: %s", st.Reason)
		}
	}
	return nil
}

// launcherPod picks the pod that runs the VMI (vmiutil.ActivePod).
func launcherPod(vmi *virtv1.VirtualMachineInstance, pods []corev1.Pod) *corev1.Pod {
	return vmiutil.ActivePod(vmi, pods, launcherpod.PodName(vmi.Name, vmi.UID))
}

func containsPod(pods []corev1.Pod, pod *corev1.Pod) bool {
	for i := range pods {
		if pods[i].UID == pod.UID {
			return true
		}
	}
	return false
}
