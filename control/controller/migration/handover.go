package migration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// ReasonMigrationFailed is the failure reason when a node agent reports the move failed.
const ReasonMigrationFailed = "MigrationFailed"

// phaseOrder ranks the phases a migration moves through once its target pod runs; a migration
// never moves back.
var phaseOrder = map[virtv1.VirtualMachineInstanceMigrationPhase]int{
	virtv1.MigrationScheduled: 0, virtv1.MigrationPreparingTarget: 1, virtv1.MigrationTargetReady: 2,
	virtv1.MigrationRunning: 3, virtv1.MigrationSucceeded: 4,
}

// handOver drives a migration whose target pod runs, as KubeVirt's controller does: the VMI's
// status.migrationState tells the node agents of both nodes what to do, and they report back
// in it (the target its address once it listens, the source the start and the end). The
// migration's phase follows: PreparingTarget, TargetReady, Running, Succeeded or Failed.
func (r *Reconciler) handOver(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance, pods []corev1.Pod) (ctrl.Result, error) {
	pod, err := r.livePod(ctx, mig, pods)
	if pod == nil || err != nil {
		return ctrl.Result{}, err
	}

	vs := vmi.Status.MigrationState
	if vs == nil || vs.MigrationUID != mig.UID {
		if vs != nil && !vs.Completed && !vs.Failed {
			return ctrl.Result{}, r.fail(ctx, mig, pods, ReasonMigrationFailed, fmt.Sprintf("VMI %s is being moved by migration %s", vmi.Name, vs.MigrationUID))
		}
		state := mig.Status.MigrationState.DeepCopy()
		state.MigrationUID = mig.UID
		state.TargetPod, state.TargetNode = pod.Name, pod.Spec.NodeName
		state.Mode = virtv1.MigrationPreCopy
		if err := r.setVMIState(ctx, vmi, state); err != nil {
			return ctrl.Result{}, err
		}
		log.FromContext(ctx).Info("Migration handed to the node agents", "vmi", vmi.Name, "sourceNode", state.SourceNode, "targetNode", state.TargetNode)
		return ctrl.Result{}, r.setPhase(ctx, mig, virtv1.MigrationPreparingTarget, state)
	}

	state := vs.DeepCopy()
	var phase virtv1.VirtualMachineInstanceMigrationPhase
	switch {
	case vs.Failed:
		reason := vs.FailureReason
		if reason == "" {
			reason = "the node agents reported the migration failed"
		}
		// The node agents' account first (start, end, what moved), then the failure.
		if err := r.setPhase(ctx, mig, mig.Status.Phase, state); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.fail(ctx, mig, pods, ReasonMigrationFailed, reason)
	case vs.Completed && vmi.Status.NodeName == vs.TargetNode:
		// Succeeded once the target's agent took the VMI over: from then on it runs there.
		phase = virtv1.MigrationSucceeded
	case vs.StartTimestamp != nil || vs.Completed:
		phase = virtv1.MigrationRunning
	case vs.TargetNodeAddress != "":
		phase = virtv1.MigrationTargetReady
	default:
		phase = virtv1.MigrationPreparingTarget
	}
	if phaseOrder[phase] < phaseOrder[mig.Status.Phase] {
		phase = mig.Status.Phase
	}
	if phase == virtv1.MigrationSucceeded && mig.Status.Phase != phase {
		log.FromContext(ctx).Info("Migration succeeded", "vmi", vmi.Name, "targetNode", state.TargetNode)
	}
	return ctrl.Result{}, r.setPhase(ctx, mig, phase, state)
}

// setVMIState writes the VMI's status.migrationState, and only that.
func (r *Reconciler) setVMIState(ctx context.Context, vmi *virtv1.VirtualMachineInstance, state *virtv1.VirtualMachineInstanceMigrationState) error {
	orig := vmi.DeepCopy()
	vmi.Status.MigrationState = state
	if equality.Semantic.DeepEqual(orig.Status, vmi.Status) {
		return nil
	}
	return r.Client.Status().Patch(ctx, vmi, client.MergeFrom(orig))
}

// abandonVMIState marks the VMI's migrationState of mig failed, so the node agents stop moving
// the VMI; a completed move is left alone. abort records that the user cancelled it (the
// source's agent then reports the abort's outcome).
func (r *Reconciler) abandonVMIState(ctx context.Context, mig *virtv1.VirtualMachineInstanceMigration, msg string, abort bool) error {
	vmi := &virtv1.VirtualMachineInstance{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: mig.Namespace, Name: mig.Spec.VMIName}, vmi)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	vs := vmi.Status.MigrationState
	if vs == nil || vs.MigrationUID != mig.UID || vs.Completed || vs.Failed {
		return nil
	}
	state := vs.DeepCopy()
	state.Failed = true
	state.FailureReason = msg
	state.AbortRequested = state.AbortRequested || abort
	end := metav1.NewTime(r.now())
	state.EndTimestamp = &end
	return r.setVMIState(ctx, vmi, state)
}
