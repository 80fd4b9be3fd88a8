package vm

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

const vmiUID types.UID = "vmi-1"

type vmiState int

const (
	none     vmiState = iota
	live              // Running
	starting          // Scheduling
	deleting          // Running with a deletion timestamp
	succeeded
	failed
)

func vmiIn(s vmiState) *virtv1.VirtualMachineInstance {
	if s == none {
		return nil
	}
	v := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", UID: vmiUID}}
	switch s {
	case live:
		v.Status.Phase = virtv1.Running
	case starting:
		v.Status.Phase = virtv1.Scheduling
	case deleting:
		v.Status.Phase = virtv1.Running
		v.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	case succeeded:
		v.Status.Phase = virtv1.Succeeded
	case failed:
		v.Status.Phase = virtv1.Failed
	}
	return v
}

var (
	startReq     = virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest}
	stopReq      = virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: ptr.To(vmiUID)}
	stopOtherReq = virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: ptr.To[types.UID]("older")}
)

func TestDecide(t *testing.T) {
	const (
		always = virtv1.RunStrategyAlways
		rerun  = virtv1.RunStrategyRerunOnFailure
		manual = virtv1.RunStrategyManual
		halted = virtv1.RunStrategyHalted
		once   = virtv1.RunStrategyOnce
	)
	for _, tc := range []struct {
		strategy   virtv1.VirtualMachineRunStrategy
		statusRS   virtv1.VirtualMachineRunStrategy // vm.status.runStrategy
		requests   []virtv1.VirtualMachineStateChangeRequest
		vmi        vmiState
		want       Action
		annotation string
	}{
		{always, "", nil, none, ActionStart, "a new VM starts"},
		{always, always, nil, live, ActionNone, ""},
		{always, always, nil, starting, ActionNone, ""},
		{always, always, nil, succeeded, ActionStop, "a finished VMI is replaced"},
		{always, always, nil, failed, ActionStop, "a failed VMI is replaced"},
		{always, always, nil, deleting, ActionNone, "wait for the old VMI to go"},
		{always, always, []virtv1.VirtualMachineStateChangeRequest{stopReq, startReq}, live, ActionStop, "restart"},
		{always, always, []virtv1.VirtualMachineStateChangeRequest{stopOtherReq}, live, ActionNone, "stale stop"},

		{rerun, "", nil, none, ActionStart, "a new VM starts"},
		{rerun, always, nil, none, ActionStart, "switched from another strategy"},
		{rerun, rerun, nil, none, ActionNone, "stopped on request stays stopped"},
		{rerun, rerun, []virtv1.VirtualMachineStateChangeRequest{startReq}, none, ActionStart, ""},
		{rerun, rerun, nil, live, ActionNone, ""},
		{rerun, rerun, nil, failed, ActionRestartAfterFailure, ""},
		{rerun, rerun, nil, succeeded, ActionStop, "success is not rerun"},
		{rerun, rerun, []virtv1.VirtualMachineStateChangeRequest{stopReq}, live, ActionStop, ""},
		{rerun, rerun, []virtv1.VirtualMachineStateChangeRequest{stopReq}, failed, ActionStop, "stop wins over rerun"},
		{rerun, rerun, nil, deleting, ActionNone, ""},

		{manual, "", nil, none, ActionNone, "manual never starts by itself"},
		{manual, manual, []virtv1.VirtualMachineStateChangeRequest{startReq}, none, ActionStart, ""},
		{manual, manual, []virtv1.VirtualMachineStateChangeRequest{startReq}, live, ActionNone, ""},
		{manual, manual, []virtv1.VirtualMachineStateChangeRequest{stopReq}, live, ActionStop, ""},
		{manual, manual, []virtv1.VirtualMachineStateChangeRequest{stopReq}, deleting, ActionNone, ""},
		{manual, manual, nil, failed, ActionNone, "a failed VMI stays"},

		{halted, always, nil, live, ActionStop, ""},
		{halted, always, nil, deleting, ActionNone, ""},
		{halted, always, nil, none, ActionNone, ""},
		{halted, halted, []virtv1.VirtualMachineStateChangeRequest{startReq}, none, ActionSwitchToAlways, ""},

		{once, "", nil, none, ActionStart, ""},
		{once, once, nil, live, ActionNone, ""},
		{once, once, nil, succeeded, ActionNone, "never recreated"},
		{once, once, nil, failed, ActionNone, "never recreated"},
	} {
		vm := &virtv1.VirtualMachine{}
		vm.Status.RunStrategy = tc.statusRS
		vm.Status.StateChangeRequests = tc.requests
		if got := Decide(tc.strategy, vm, vmiIn(tc.vmi)); got != tc.want {
			t.Errorf("%s, status %q, requests %v, vmi %d (%s): got %s, want %s", tc.strategy, tc.statusRS, tc.requests, tc.vmi, tc.annotation, got, tc.want)
		}
	}
}

func TestRunningFlagIsAStrategy(t *testing.T) {
	for _, tc := range []struct {
		running *bool
		want    virtv1.VirtualMachineRunStrategy
	}{{ptr.To(true), virtv1.RunStrategyAlways}, {ptr.To(false), virtv1.RunStrategyHalted}, {nil, virtv1.RunStrategyHalted}} {
		vm := &virtv1.VirtualMachine{Spec: virtv1.VirtualMachineSpec{Running: tc.running}}
		if got, err := vm.RunStrategy(); err != nil || got != tc.want {
			t.Errorf("running %v: %q %v", tc.running, got, err)
		}
	}
}

func TestFirstRequestDone(t *testing.T) {
	for _, tc := range []struct {
		req  virtv1.VirtualMachineStateChangeRequest
		vmi  vmiState
		want bool
	}{
		{startReq, none, false},
		{startReq, starting, true},
		{startReq, deleting, false},
		{startReq, failed, false},
		{stopReq, live, false},
		{stopReq, deleting, false},
		{stopReq, none, true},
		{stopOtherReq, live, true},
		{virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest}, live, true},
	} {
		vm := &virtv1.VirtualMachine{}
		vm.Status.StateChangeRequests = []virtv1.VirtualMachineStateChangeRequest{tc.req}
		if got := firstRequestDone(vm, vmiIn(tc.vmi)); got != tc.want {
			t.Errorf("%+v with vmi %d: %v, want %v", tc.req, tc.vmi, got, tc.want)
		}
	}
}

func TestStartBackoff(t *testing.T) {
	noJitter := func(int64) int64 { return 0 }
	maxJitter := func(n int64) int64 { return n - 1 }
	for _, tc := range []struct {
		count  int
		jitter func(int64) int64
		want   time.Duration
	}{
		{1, noJitter, 10 * time.Second},
		{1, maxJitter, 15 * time.Second},
		{2, noJitter, 40 * time.Second},
		{5, noJitter, 250 * time.Second},
		{6, noJitter, 300 * time.Second},
	} {
		if got := StartBackoff(tc.count, tc.jitter); got != tc.want {
			t.Errorf("StartBackoff(%d) = %v, want %v", tc.count, got, tc.want)
		}
	}
}

func TestNextStartFailure(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	noJitter := func(int64) int64 { return 0 }

	early := vmiIn(failed)
	sf := nextStartFailure(nil, virtv1.RunStrategyAlways, early, now, noJitter)
	if sf == nil || sf.ConsecutiveFailCount != 1 || !sf.RetryAfterTimestamp.Time.Equal(now.Add(10*time.Second)) {
		t.Fatalf("first early failure: %+v", sf)
	}
	if again := nextStartFailure(sf, virtv1.RunStrategyAlways, early, now, noJitter); again != sf {
		t.Error("the same VMI was counted twice")
	}
	next := early.DeepCopy()
	next.UID = "vmi-2"
	if sf2 := nextStartFailure(sf, virtv1.RunStrategyAlways, next, now, noJitter); sf2.ConsecutiveFailCount != 2 {
		t.Errorf("second failure: %+v", sf2)
	}

	ran := vmiIn(failed)
	ran.Status.PhaseTransitionTimestamps = []virtv1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: virtv1.Running}}
	if got := nextStartFailure(sf, virtv1.RunStrategyAlways, ran, now, noJitter); got != nil {
		t.Errorf("a VMI that ran keeps the failure record: %+v", got)
	}
	if got := nextStartFailure(sf, virtv1.RunStrategyManual, early, now, noJitter); got != nil {
		t.Errorf("manual keeps the failure record: %+v", got)
	}
	if got := nextStartFailure(sf, virtv1.RunStrategyAlways, nil, now, noJitter); got != sf {
		t.Error("no VMI dropped the record")
	}
}

func TestPrintableStatus(t *testing.T) {
	deletedVM := func(vm *virtv1.VirtualMachine) { vm.DeletionTimestamp = &metav1.Time{Time: time.Now()} }
	crashLooping := func(vm *virtv1.VirtualMachine) {
		vm.Status.StartFailure = &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 1}
	}
	withCond := func(t virtv1.VirtualMachineInstanceConditionType, s corev1.ConditionStatus, reason string) func(*virtv1.VirtualMachineInstance) {
		return func(v *virtv1.VirtualMachineInstance) {
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: t, Status: s, Reason: reason})
		}
	}
	migrating := func(v *virtv1.VirtualMachineInstance) {
		v.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: &metav1.Time{Time: time.Now()}}
	}
	for _, tc := range []struct {
		name     string
		strategy virtv1.VirtualMachineRunStrategy
		vm       func(*virtv1.VirtualMachine)
		vmi      vmiState
		mutate   []func(*virtv1.VirtualMachineInstance)
		exp      Expectation
		want     virtv1.VirtualMachinePrintableStatus
	}{
		{"deleted VM wins over all", virtv1.RunStrategyAlways, deletedVM, deleting, nil, Expectation{}, virtv1.VirtualMachineStatusTerminating},
		{"VMI being deleted", virtv1.RunStrategyHalted, nil, deleting, nil, Expectation{}, virtv1.VirtualMachineStatusStopping},
		{"VMI just deleted", virtv1.RunStrategyHalted, nil, live, nil, Expectation{StopExpected: true}, virtv1.VirtualMachineStatusStopping},
		{"stopping wins over migrating", virtv1.RunStrategyHalted, nil, deleting, []func(*virtv1.VirtualMachineInstance){migrating}, Expectation{}, virtv1.VirtualMachineStatusStopping},
		{"migrating", virtv1.RunStrategyAlways, nil, live, []func(*virtv1.VirtualMachineInstance){migrating}, Expectation{}, virtv1.VirtualMachineStatusMigrating},
		{"paused", virtv1.RunStrategyAlways, nil, live, []func(*virtv1.VirtualMachineInstance){withCond(virtv1.VirtualMachineInstancePaused, corev1.ConditionTrue, "")}, Expectation{}, virtv1.VirtualMachineStatusPaused},
		{"running", virtv1.RunStrategyAlways, nil, live, nil, Expectation{}, virtv1.VirtualMachineStatusRunning},
		{"unpaused is running", virtv1.RunStrategyAlways, nil, live, []func(*virtv1.VirtualMachineInstance){withCond(virtv1.VirtualMachineInstancePaused, corev1.ConditionFalse, "")}, Expectation{}, virtv1.VirtualMachineStatusRunning},
		{"unschedulable", virtv1.RunStrategyAlways, nil, starting, []func(*virtv1.VirtualMachineInstance){withCond(virtv1.VirtualMachineInstancePodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable)}, Expectation{}, virtv1.VirtualMachineStatusUnschedulable},
		{"unscheduled for another reason is starting", virtv1.RunStrategyAlways, nil, starting, []func(*virtv1.VirtualMachineInstance){withCond(virtv1.VirtualMachineInstancePodScheduled, corev1.ConditionFalse, "SchedulerError")}, Expectation{}, virtv1.VirtualMachineStatusStarting},
		{"unschedulable wins over image errors", virtv1.RunStrategyAlways, nil, starting, []func(*virtv1.VirtualMachineInstance){
			withCond("Synchronized", corev1.ConditionFalse, "ErrImagePull"),
			withCond(virtv1.VirtualMachineInstancePodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable)}, Expectation{}, virtv1.VirtualMachineStatusUnschedulable},
		{"image pull", virtv1.RunStrategyAlways, nil, starting, []func(*virtv1.VirtualMachineInstance){withCond("Synchronized", corev1.ConditionFalse, "ErrImagePull")}, Expectation{}, virtv1.VirtualMachineStatusErrImagePull},
		{"image backoff", virtv1.RunStrategyAlways, nil, starting, []func(*virtv1.VirtualMachineInstance){withCond("Synchronized", corev1.ConditionFalse, "ImagePullBackOff")}, Expectation{}, virtv1.VirtualMachineStatusImagePullBackOff},
		{"scheduling", virtv1.RunStrategyAlways, nil, starting, nil, Expectation{}, virtv1.VirtualMachineStatusStarting},
		{"VMI just created", virtv1.RunStrategyAlways, nil, none, nil, Expectation{StartExpected: true}, virtv1.VirtualMachineStatusStarting},
		{"crash loop without VMI", virtv1.RunStrategyAlways, crashLooping, none, nil, Expectation{}, virtv1.VirtualMachineStatusCrashLoopBackOff},
		{"crash loop with the failed VMI", virtv1.RunStrategyRerunOnFailure, crashLooping, failed, nil, Expectation{}, virtv1.VirtualMachineStatusCrashLoopBackOff},
		{"start failures do not matter to manual", virtv1.RunStrategyManual, crashLooping, failed, nil, Expectation{}, virtv1.VirtualMachineStatusStopped},
		{"halted", virtv1.RunStrategyHalted, nil, none, nil, Expectation{}, virtv1.VirtualMachineStatusStopped},
		{"succeeded", virtv1.RunStrategyOnce, nil, succeeded, nil, Expectation{}, virtv1.VirtualMachineStatusStopped},
		{"unknown phase", virtv1.RunStrategyAlways, nil, live, []func(*virtv1.VirtualMachineInstance){func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Unknown }}, Expectation{}, virtv1.VirtualMachineStatusUnknown},
	} {
		vm := &virtv1.VirtualMachine{Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(tc.strategy)}}
		if tc.vm != nil {
			tc.vm(vm)
		}
		vmi := vmiIn(tc.vmi)
		for _, m := range tc.mutate {
			m(vmi)
		}
		if got := PrintableStatus(vm, vmi, tc.exp); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}
