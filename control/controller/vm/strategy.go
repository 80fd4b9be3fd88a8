package vm

import (
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

// Action is what the run strategy asks of the VM controller in one round.
type Action string

const (
	// ActionNone leaves the VMI as it is.
	ActionNone Action = "None"
	// ActionStart creates a VMI from the template.
	ActionStart Action = "Start"
	// ActionStop deletes the current VMI.
	ActionStop Action = "Stop"
	// ActionRestartAfterFailure queues a Start request, then deletes the failed
	// VMI; the request makes the next round start a new one (RerunOnFailure).
	ActionRestartAfterFailure Action = "RestartAfterFailure"
	// ActionSwitchToAlways turns a Halted VM with a Start request into an
	// Always one (how a start request is honoured for Halted VMs).
	ActionSwitchToAlways Action = "SwitchToAlways"
)

// Decide returns the action for vm given its current VMI (nil when there is
// none), following KubeVirt's run strategies:
//
//   - Always: a VMI always runs; a final VMI or a Stop request for it is
//     deleted, and a new one started once it is gone.
//   - RerunOnFailure: a failed VMI is replaced, a succeeded one is not; a Stop
//     request deletes it for good.
//   - Manual: only Start and Stop requests start and stop VMIs.
//   - Halted: no VMI runs.
//   - Once: one VMI is started and never replaced.
func Decide(strategy virtv1.VirtualMachineRunStrategy, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) Action {
	deleting := vmi != nil && vmi.DeletionTimestamp != nil
	switch strategy {
	case virtv1.RunStrategyAlways:
		if vmi == nil {
			return ActionStart
		}
		if !deleting && (hasStopRequestFor(vm, vmi) || vmiutil.IsFinal(vmi)) {
			return ActionStop
		}
	case virtv1.RunStrategyRerunOnFailure:
		if vmi == nil {
			// A VMI stopped on request stays stopped; coming from another
			// strategy (or never having started) means start.
			if hasStartRequest(vm) || vm.Status.RunStrategy != strategy {
				return ActionStart
			}
			return ActionNone
		}
		if deleting {
			return ActionNone
		}
		switch {
		case vmi.Status.Phase == virtv1.Failed && !hasStopRequestFor(vm, vmi):
			return ActionRestartAfterFailure
		case hasStopRequestFor(vm, vmi) || vmiutil.IsFinal(vmi):
			return ActionStop
		}
	case virtv1.RunStrategyManual:
		if vmi == nil {
			if hasStartRequest(vm) {
				return ActionStart
			}
			return ActionNone
		}
		if !deleting && hasStopRequestFor(vm, vmi) {
			return ActionStop
		}
	case virtv1.RunStrategyHalted:
		if vmi == nil {
			if hasStartRequest(vm) {
				return ActionSwitchToAlways
			}
			return ActionNone
		}
		if !deleting {
			return ActionStop
		}
	case virtv1.RunStrategyOnce:
		if vmi == nil {
			return ActionStart
		}
	}
	return ActionNone
}

func hasStartRequest(vm *virtv1.VirtualMachine) bool {
	r := vm.Status.StateChangeRequests
	return len(r) > 0 && r[0].Action == virtv1.StartRequest
}

func hasStartPausedRequest(vm *virtv1.VirtualMachine) bool {
	return hasStartRequest(vm) &&
		vm.Status.StateChangeRequests[0].Data[virtv1.StartRequestDataPausedKey] == virtv1.StartRequestDataPausedTrue
}

// hasStopRequestFor reports whether the first request stops this very VMI;
// only the first request is ever acted on.
func hasStopRequestFor(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool {
	r := vm.Status.StateChangeRequests
	return len(r) > 0 && r[0].Action == virtv1.StopRequest && r[0].UID != nil && *r[0].UID == vmi.UID
}

// firstRequestDone reports whether the first state change request has been
// carried out and can be dropped.
func firstRequestDone(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) bool {
	r := vm.Status.StateChangeRequests
	if len(r) == 0 {
		return false
	}
	switch r[0].Action {
	case virtv1.StopRequest:
		// Done once that VMI is gone; a Stop without UID can never be acted on.
		return vmi == nil || r[0].UID == nil || *r[0].UID != vmi.UID
	case virtv1.StartRequest:
		return vmi != nil && vmi.DeletionTimestamp == nil && !vmiutil.IsFinal(vmi)
	}
	// An unknown action would block the queue forever.
	return true
}

// Start failure backoff, as KubeVirt: a VMI that fails before ever running
// delays the next automatic start by 10 s × failures², plus up to half of that
// at random so that many failing VMs spread out, at most 5 minutes.
const (
	maxStartBackoff = 300 * time.Second
	minStartBackoff = 10 * time.Second
)

// StartBackoff is the delay before the next start after failCount early failures.
func StartBackoff(failCount int, jitter func(n int64) int64) time.Duration {
	if failCount < 1 {
		failCount = 1
	}
	d := int64(minStartBackoff/time.Second) * int64(failCount*failCount)
	d += jitter(d/2 + 1)
	if d > int64(maxStartBackoff/time.Second) {
		d = int64(maxStartBackoff / time.Second)
	}
	return time.Duration(d) * time.Second
}

func randomJitter(n int64) int64 { return rand.Int64N(n) }

func wasRunning(vmi *virtv1.VirtualMachineInstance) bool {
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		if ts.Phase == virtv1.Running {
			return true
		}
	}
	return vmi.Status.Phase == virtv1.Running
}

// nextStartFailure updates the start failure record: cleared once a VMI ran or
// when the strategy never restarts by itself, counted when a VMI ended before
// it ever ran.
func nextStartFailure(cur *virtv1.VirtualMachineStartFailure, strategy virtv1.VirtualMachineRunStrategy, vmi *virtv1.VirtualMachineInstance, now time.Time, jitter func(int64) int64) *virtv1.VirtualMachineStartFailure {
	autoRestart := strategy == virtv1.RunStrategyAlways || strategy == virtv1.RunStrategyRerunOnFailure || strategy == virtv1.RunStrategyOnce
	if !autoRestart || (vmi != nil && wasRunning(vmi)) {
		return nil
	}
	if vmi == nil || !vmiutil.IsFinal(vmi) {
		return cur
	}
	if cur != nil && cur.LastFailedVMIUID == vmi.UID {
		return cur
	}
	count := 1
	if cur != nil {
		count = cur.ConsecutiveFailCount + 1
	}
	retry := metav1.NewTime(now.Add(StartBackoff(count, jitter)))
	return &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: count, LastFailedVMIUID: vmi.UID, RetryAfterTimestamp: &retry}
}

// startDelay is how long an automatic start must still wait.
func startDelay(vm *virtv1.VirtualMachine, now time.Time) time.Duration {
	sf := vm.Status.StartFailure
	if sf == nil || sf.RetryAfterTimestamp == nil {
		return 0
	}
	if d := sf.RetryAfterTimestamp.Sub(now); d > 0 {
		return d
	}
	return 0
}
