// Package vm is the VirtualMachine controller: it starts and stops the VM's
// VMI according to the run strategy and the queued start/stop requests, carries
// the volume and memory dump requests to the template and the running VMI, and
// reports the VM's status (printableStatus, conditions, generations).
package vm

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

const conflictRetry = 200 * time.Millisecond

// Reconciler reconciles VirtualMachines.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Jitter spreads start backoffs; random when nil.
	Jitter func(int64) int64
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile runs one round for one VM.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vm := &virtv1.VirtualMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, vm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	res, err := r.reconcile(ctx, vm.DeepCopy())
	if apierrors.IsConflict(err) {
		log.FromContext(ctx).V(1).Info("Lost a write race, retrying", "reason", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, vm *virtv1.VirtualMachine) (ctrl.Result, error) {
	vmi, err := r.currentVMI(ctx, vm)
	if err != nil {
		return ctrl.Result{}, err
	}
	if vm.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalize(ctx, vm, vmi)
	}
	if err := vmiutil.AddFinalizer(ctx, r.Client, vm, virtv1.VirtualMachineControllerFinalizer); err != nil {
		return ctrl.Result{}, err
	}

	round := Round{Now: r.now(), Jitter: r.Jitter}
	var res ctrl.Result
	strategy, err := vm.RunStrategy()
	if err != nil {
		round.SyncErr = &SyncError{Reason: ReasonFailedCreate, Err: err}
	} else {
		round.Strategy = strategy
		res, err = r.syncRunStrategy(ctx, vm, vmi, &round)
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	// A VMI created or deleted this round is not the one the cache shows: hotplug waits for
	// the next round, as in KubeVirt.
	if !round.Expect.StartExpected && !round.Expect.StopExpected {
		err := r.syncHotplug(ctx, vm, vmi)
		switch {
		case apierrors.IsConflict(err):
			return ctrl.Result{}, err
		case err != nil && round.SyncErr == nil:
			round.SyncErr = &SyncError{Reason: ReasonHotplugVolumeError, Err: err}
		}
	}
	if vmi != nil && !round.Expect.StopExpected {
		if err := r.bumpGeneration(ctx, vm, vmi); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.writeStatus(ctx, vm, vmi, round); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.releaseVMI(ctx, vmi); err != nil {
		return ctrl.Result{}, err
	}
	if round.SyncErr != nil {
		// Retried with the queue's backoff; the Failure condition shows it.
		return ctrl.Result{}, round.SyncErr
	}
	return res, nil
}

// currentVMI returns the VMI of vm, adopting a VMI of the same name that has no
// controller. A VMI controlled by another object counts as none: starting
// then fails with AlreadyExists until it is gone.
func (r *Reconciler) currentVMI(ctx context.Context, vm *virtv1.VirtualMachine) (*virtv1.VirtualMachineInstance, error) {
	vmi := &virtv1.VirtualMachineInstance{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ref := metav1.GetControllerOf(vmi)
	switch {
	case ref != nil && ref.UID == vm.UID:
		return vmi, nil
	case ref != nil:
		return nil, nil
	case vm.DeletionTimestamp != nil || vmi.DeletionTimestamp != nil:
		return nil, nil
	}
	orig := vmi.DeepCopy()
	vmi.OwnerReferences = append(vmi.OwnerReferences, *metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind))
	if err := r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, fmt.Errorf("adopting VMI: %w", err)
	}
	log.FromContext(ctx).Info("Adopted orphan VMI", "uid", vmi.UID)
	return vmi, nil
}

// syncRunStrategy carries out what the run strategy asks for.
func (r *Reconciler) syncRunStrategy(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, round *Round) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	action := Decide(round.Strategy, vm, vmi)
	switch action {
	case ActionStart:
		if d := startDelay(vm, round.Now); d > 0 && round.Strategy != virtv1.RunStrategyManual {
			logger.Info("Delaying start after failed starts", "runStrategy", round.Strategy, "wait", d.Round(time.Second))
			return ctrl.Result{RequeueAfter: d}, nil
		}
		round.SyncErr = r.startVMI(ctx, vm, round)
	case ActionStop:
		round.SyncErr = r.stopVMI(ctx, vm, vmi, round)
	case ActionRestartAfterFailure:
		// The Start request is stored before the VMI is deleted: once the failed
		// VMI is gone, nothing else would say that a new one is wanted.
		if !hasStartRequest(vm) {
			if err := r.patchStatus(ctx, vm, func(v *virtv1.VirtualMachine) {
				v.Status.StateChangeRequests = append(v.Status.StateChangeRequests, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest})
			}); err != nil {
				return ctrl.Result{}, err
			}
		}
		round.SyncErr = r.stopVMI(ctx, vm, vmi, round)
	case ActionSwitchToAlways:
		logger.Info("Start request on a halted VM, switching it to runStrategy Always")
		orig := vm.DeepCopy()
		if vm.Spec.RunStrategy != nil {
			vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways)
		} else {
			vm.Spec.Running = ptr.To(true)
		}
		if err := r.Client.Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, err
		}
	}
	if action != ActionNone {
		logger.V(1).Info("Run strategy acted", "runStrategy", round.Strategy, "action", action)
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) startVMI(ctx context.Context, vm *virtv1.VirtualMachine, round *Round) *SyncError {
	vmi := NewVMI(vm)
	err := r.Client.Create(ctx, vmi)
	switch {
	case apierrors.IsAlreadyExists(err):
		// The cache has not caught up with a VMI created moments ago, or the old
		// VMI of a deleted VM of the same name is still going away.
		round.Expect.StartExpected = true
		return nil
	case err != nil:
		r.Recorder.Eventf(vm, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreateVMI", "Error creating virtual machine instance: %v", err)
		return &SyncError{Reason: ReasonFailedCreate, Err: fmt.Errorf("failure while starting VMI: %w", err)}
	}
	round.Expect.StartExpected = true
	round.Created = true
	log.FromContext(ctx).Info("Started the VM by creating a VMI", "runStrategy", round.Strategy, "vmiUID", vmi.UID)
	r.Recorder.Eventf(vm, vmi, corev1.EventTypeNormal, "SuccessfulCreate", "CreateVMI", "Started the virtual machine by creating the new virtual machine instance %s", vmi.Name)
	return nil
}

func (r *Reconciler) stopVMI(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, round *Round) *SyncError {
	if vmi == nil || vmi.DeletionTimestamp != nil {
		return nil
	}
	uid := vmi.UID
	err := r.Client.Delete(ctx, vmi, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		r.Recorder.Eventf(vm, vmi, corev1.EventTypeWarning, ReasonFailedDelete, "DeleteVMI", "Error deleting virtual machine instance %s: %v", vmi.Name, err)
		return &SyncError{Reason: ReasonFailedDelete, Err: fmt.Errorf("failure attempting to delete VMI: %w", err)}
	}
	round.Expect.StopExpected = true
	log.FromContext(ctx).Info("Stopped the VM by deleting its VMI", "runStrategy", round.Strategy, "vmiUID", uid, "vmiPhase", vmi.Status.Phase)
	r.Recorder.Eventf(vm, vmi, corev1.EventTypeNormal, "SuccessfulDelete", "DeleteVMI", "Stopped the virtual machine by deleting the virtual machine instance %s", uid)
	return nil
}

// finalize deletes the VMI of a deleted VM and lets the VM go once the VMI is
// gone, so that deleting a VM waits for its guest to shut down. With orphan
// propagation the VMI is left running.
func (r *Reconciler) finalize(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) error {
	round := Round{Now: r.now(), Jitter: r.Jitter}
	round.Strategy, _ = vm.RunStrategy()
	orphan := controllerutil.ContainsFinalizer(vm, metav1.FinalizerOrphanDependents)
	if vmi != nil && !orphan {
		if serr := r.stopVMI(ctx, vm, vmi, &round); serr != nil {
			round.SyncErr = serr
		}
	}
	if err := r.writeStatus(ctx, vm, vmi, round); err != nil {
		return err
	}
	if err := r.releaseVMI(ctx, vmi); err != nil {
		return err
	}
	if round.SyncErr != nil {
		return round.SyncErr
	}
	if (vmi == nil || orphan) && controllerutil.ContainsFinalizer(vm, virtv1.VirtualMachineControllerFinalizer) {
		log.FromContext(ctx).Info("VMI is gone, releasing the deleted VM")
		return client.IgnoreNotFound(vmiutil.RemoveFinalizers(ctx, r.Client, vm, virtv1.VirtualMachineControllerFinalizer))
	}
	return nil
}

// bumpGeneration records the VM's new generation on a VMI whose template is
// unchanged (e.g. only the run strategy changed), so that observedGeneration
// keeps up with generation; KubeVirt does the same.
func (r *Reconciler) bumpGeneration(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) error {
	h := vmi.Annotations[TemplateHashAnnotation]
	if vmi.DeletionTimestamp != nil || h == "" || h != TemplateHash(vm) || vmiGeneration(vmi) == vm.Generation {
		return nil
	}
	orig := vmi.DeepCopy()
	vmi.Annotations[GenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	return r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// releaseVMI drops the VM controller's finalizer from a final VMI once its
// outcome has been written to the VM.
func (r *Reconciler) releaseVMI(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	if vmi == nil || !vmiutil.IsFinal(vmi) || !controllerutil.ContainsFinalizer(vmi, virtv1.VirtualMachineControllerFinalizer) {
		return nil
	}
	return client.IgnoreNotFound(vmiutil.RemoveFinalizers(ctx, r.Client, vmi, virtv1.VirtualMachineControllerFinalizer))
}

func (r *Reconciler) writeStatus(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, round Round) error {
	st := DesiredStatus(vm, vmi, round)
	if equality.Semantic.DeepEqual(st, vm.Status) {
		return nil
	}
	old, oldDump := vm.Status.PrintableStatus, memoryDumpPhaseOf(vm.Status.MemoryDumpRequest)
	err := r.patchStatus(ctx, vm, func(v *virtv1.VirtualMachine) { v.Status = st })
	if err == nil && old != st.PrintableStatus {
		log.FromContext(ctx).Info("VM status changed", "from", old, "to", st.PrintableStatus)
	}
	if d := memoryDumpPhaseOf(st.MemoryDumpRequest); err == nil && d != oldDump {
		log.FromContext(ctx).Info("Memory dump moved on", "from", oldDump, "to", d, "claim", claimOf(st.MemoryDumpRequest, vm.Status.MemoryDumpRequest))
	}
	if apierrors.IsNotFound(err) && vm.DeletionTimestamp != nil {
		return nil
	}
	return err
}

func (r *Reconciler) patchStatus(ctx context.Context, vm *virtv1.VirtualMachine, mutate func(*virtv1.VirtualMachine)) error {
	orig := vm.DeepCopy()
	mutate(vm)
	return r.Client.Status().Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}
