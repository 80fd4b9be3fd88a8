package vm

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

// SyncError is a failure of one round, shown in the Failure condition.
type SyncError struct {
	Reason string
	Err    error
}

func (e *SyncError) Error() string { return e.Err.Error() }
func (e *SyncError) Unwrap() error { return e.Err }

// Reasons of the Failure condition, as in KubeVirt.
const (
	ReasonFailedCreate = "FailedCreate"
	ReasonFailedDelete = "FailedDelete"
)

// restartRequiredMessage is KubeVirt's wording.
const restartRequiredMessage = "a non-live-updatable field was changed in the template spec"

// conditionsNotFromVMI are VM conditions the VM controller decides itself; all
// others mirror the VMI's.
var conditionsNotFromVMI = []virtv1.VirtualMachineConditionType{
	virtv1.VirtualMachineReady, virtv1.VirtualMachineFailure, virtv1.VirtualMachineRestartRequired,
}

// Round is what one reconcile round learned and did.
type Round struct {
	Strategy virtv1.VirtualMachineRunStrategy
	Expect   Expectation
	// Created is set when this round created a VMI: a Start request that asked
	// for it is done, even if the VMI ends before the cache shows it alive.
	Created bool
	SyncErr *SyncError
	Now     time.Time
	// Jitter spreads start backoffs; random when nil.
	Jitter func(int64) int64
}

// DesiredStatus is the status of vm given its VMI (nil if none) after round.
func DesiredStatus(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, round Round) virtv1.VirtualMachineStatus {
	st := *vm.Status.DeepCopy()
	now := metav1.NewTime(round.Now)
	jitter := round.Jitter
	if jitter == nil {
		jitter = randomJitter
	}

	st.Created = vmi != nil
	st.Ready = vmi != nil && vmiutil.HasCondition(vmi, virtv1.VirtualMachineInstanceReady, corev1.ConditionTrue)
	if vmi != nil {
		if g := vmiGeneration(vmi); g >= 0 {
			st.ObservedGeneration = g
		}
		st.DesiredGeneration = vm.Generation
	}
	// Recorded from the first start on; RerunOnFailure compares against it.
	if round.Strategy != "" && (st.RunStrategy != "" || st.Created) {
		st.RunStrategy = round.Strategy
	}
	withStatus := vm.DeepCopy()
	withStatus.Status = st
	if firstRequestDone(withStatus, vmi) || (round.Created && hasStartRequest(withStatus)) {
		st.StateChangeRequests = slices.Clone(st.StateChangeRequests[1:])
		if len(st.StateChangeRequests) == 0 {
			st.StateChangeRequests = nil
		}
	}
	st.VolumeRequests = pendingVolumeRequests(vm)
	st.MemoryDumpRequest = nextMemoryDumpRequest(vm, vmi)
	st.StartFailure = nextStartFailure(st.StartFailure, round.Strategy, vmi, round.Now, jitter)

	syncReadyCondition(&st, vmi, now)
	if round.SyncErr != nil {
		setCondition(&st, virtv1.VirtualMachineCondition{
			Type: virtv1.VirtualMachineFailure, Status: corev1.ConditionTrue,
			Reason: round.SyncErr.Reason, Message: round.SyncErr.Error(), LastTransitionTime: now,
		})
	} else {
		removeCondition(&st, virtv1.VirtualMachineFailure)
	}
	syncVMIConditions(&st, vmi)
	if restartRequired(vm, vmi) {
		setCondition(&st, virtv1.VirtualMachineCondition{
			Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue,
			Message: restartRequiredMessage, LastTransitionTime: now,
		})
	} else {
		removeCondition(&st, virtv1.VirtualMachineRestartRequired)
	}

	withStatus.Status = st
	st.PrintableStatus = PrintableStatus(withStatus, vmi, round.Expect)
	return st
}

// syncReadyCondition mirrors the VMI's Ready condition, false when there is no
// VMI or it has none yet.
func syncReadyCondition(st *virtv1.VirtualMachineStatus, vmi *virtv1.VirtualMachineInstance, now metav1.Time) {
	c := virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse, LastProbeTime: now, LastTransitionTime: now}
	switch {
	case vmi == nil:
		c.Reason, c.Message = "VMINotExists", "VMI does not exist"
	case vmiutil.Condition(vmi, virtv1.VirtualMachineInstanceReady) == nil:
		c.Reason, c.Message = "VMIConditionMissing", "VMI is missing the Ready condition"
	default:
		r := vmiutil.Condition(vmi, virtv1.VirtualMachineInstanceReady)
		c = virtv1.VirtualMachineCondition{
			Type: virtv1.VirtualMachineReady, Status: r.Status, Reason: r.Reason, Message: r.Message,
			LastProbeTime: r.LastProbeTime, LastTransitionTime: r.LastTransitionTime,
		}
	}
	setCondition(st, c)
}

// syncVMIConditions copies the VMI's other conditions (Paused, PodScheduled,
// Synchronized...) and drops those the VMI no longer has.
func syncVMIConditions(st *virtv1.VirtualMachineStatus, vmi *virtv1.VirtualMachineInstance) {
	onVMI := map[virtv1.VirtualMachineConditionType]bool{}
	if vmi != nil {
		for _, c := range vmi.Status.Conditions {
			t := virtv1.VirtualMachineConditionType(c.Type)
			if slices.Contains(conditionsNotFromVMI, t) {
				continue
			}
			onVMI[t] = true
			setCondition(st, virtv1.VirtualMachineCondition{
				Type: t, Status: c.Status, Reason: c.Reason, Message: c.Message,
				LastProbeTime: c.LastProbeTime, LastTransitionTime: c.LastTransitionTime,
			})
		}
	}
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c virtv1.VirtualMachineCondition) bool {
		return !slices.Contains(conditionsNotFromVMI, c.Type) && !onVMI[c.Type]
	})
}

// setCondition replaces or appends c, keeping the old timestamps when the
// status did not change so that an unchanged condition writes nothing.
func setCondition(st *virtv1.VirtualMachineStatus, c virtv1.VirtualMachineCondition) {
	for i := range st.Conditions {
		old := &st.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
			if c.Reason == old.Reason && c.Message == old.Message {
				c.LastProbeTime = old.LastProbeTime
			}
		}
		*old = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

func removeCondition(st *virtv1.VirtualMachineStatus, t virtv1.VirtualMachineConditionType) {
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c virtv1.VirtualMachineCondition) bool { return c.Type == t })
}
