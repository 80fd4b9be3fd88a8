package vmi

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

type podState int

const (
	noPod podState = iota
	podPending
	podUnschedulable
	podRunningNotReady
	podReady
	podTerminating
	podSucceeded
	podFailed
)

func makePod(s podState) *corev1.Pod {
	if s == noPod {
		return nil
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "pod-uid"}}
	switch s {
	case podPending:
		p.Status.Phase = corev1.PodPending
	case podUnschedulable:
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available"}}
	case podRunningNotReady:
		p.Spec.NodeName = "node-1"
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	case podReady:
		p.Spec.NodeName = "node-1"
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	case podTerminating:
		p.Spec.NodeName = "node-1"
		p.Status.Phase = corev1.PodRunning
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	case podSucceeded:
		p.Spec.NodeName = "node-1"
		p.Status.Phase = corev1.PodSucceeded
	case podFailed:
		p.Spec.NodeName = "node-1"
		p.Status.Phase = corev1.PodFailed
	}
	return p
}

func TestNextPhase(t *testing.T) {
	const (
		unset      = virtv1.VmPhaseUnset
		pending    = virtv1.Pending
		scheduling = virtv1.Scheduling
		scheduled  = virtv1.Scheduled
		running    = virtv1.Running
		succeeded  = virtv1.Succeeded
		failed     = virtv1.Failed
	)
	for _, tc := range []struct {
		from     virtv1.VirtualMachineInstancePhase
		pod      podState
		deleting bool
		want     virtv1.VirtualMachineInstancePhase
		reason   string
	}{
		{unset, noPod, false, pending, ""},
		{pending, noPod, false, pending, ""},
		{pending, noPod, true, failed, ReasonDeletedBeforeLaunch},
		{unset, podPending, false, scheduling, ""},
		{pending, podReady, false, scheduling, ""}, // one step at a time, as KubeVirt
		{scheduling, podPending, false, scheduling, ""},
		{scheduling, podUnschedulable, false, scheduling, ""},
		{scheduling, podRunningNotReady, false, scheduling, ""},
		{scheduling, podReady, false, scheduled, ""},
		{scheduling, podReady, true, scheduling, ""},
		{scheduling, noPod, false, failed, ReasonPodMissing},
		{scheduling, podTerminating, false, failed, ReasonPodDeleted},
		{scheduling, podFailed, false, failed, ReasonPodFailed},
		{scheduling, podSucceeded, false, failed, ReasonPodFailed},
		{scheduled, podReady, false, scheduled, ""},
		{scheduled, podTerminating, true, scheduled, ""},
		{scheduled, noPod, true, failed, ReasonPodDeleted},
		{scheduled, noPod, false, failed, ReasonPodMissing},
		{scheduled, podFailed, false, failed, ReasonPodFailed},
		{scheduled, podSucceeded, false, scheduled, ""}, // the node agent reports a clean exit
		{running, podReady, false, running, ""},
		{running, noPod, false, failed, ReasonPodMissing},
		{running, podFailed, false, failed, ReasonPodFailed},
		{running, podTerminating, false, failed, ReasonPodDeleted},
		{running, podTerminating, true, running, ""}, // the VMI's own deletion: the node agent reports the end
		{scheduled, podTerminating, false, failed, ReasonPodDeleted},
		{succeeded, noPod, false, succeeded, ""},
		{failed, podFailed, true, failed, ""},
		{virtv1.Unknown, noPod, false, virtv1.Unknown, ""},
	} {
		vmi := &virtv1.VirtualMachineInstance{}
		vmi.Status.Phase = tc.from
		if tc.deleting {
			vmi.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		got, reason := NextPhase(vmi, makePod(tc.pod))
		if got != tc.want || reason != tc.reason {
			t.Errorf("from %q, pod %d, deleting %v: got %q (%q), want %q (%q)", tc.from, tc.pod, tc.deleting, got, reason, tc.want, tc.reason)
		}
	}
}

func TestDesiredStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

	t.Run("unschedulable pod", func(t *testing.T) {
		vmi := &virtv1.VirtualMachineInstance{}
		vmi.Status.Phase = virtv1.Scheduling
		pod := makePod(podUnschedulable)
		pod.Status.QOSClass = corev1.PodQOSBurstable
		st := desiredStatus(vmi, pod, []corev1.Pod{*pod}, nil, now)
		c := findCond(st, virtv1.VirtualMachineInstancePodScheduled)
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || c.Message == "" {
			t.Errorf("PodScheduled condition %+v", c)
		}
		if st.QOSClass == nil || *st.QOSClass != corev1.PodQOSBurstable {
			t.Errorf("qosClass %v", st.QOSClass)
		}
		if st.ActivePods != nil {
			t.Errorf("activePods %v for an unbound pod", st.ActivePods)
		}
		if st.Phase != virtv1.Scheduling || len(st.PhaseTransitionTimestamps) != 0 {
			t.Errorf("phase %q, timestamps %v", st.Phase, st.PhaseTransitionTimestamps)
		}

		// Once scheduled, the copied condition goes away.
		vmi.Status = st
		st = desiredStatus(vmi, makePod(podRunningNotReady), nil, nil, now)
		if findCond(st, virtv1.VirtualMachineInstancePodScheduled) != nil {
			t.Error("PodScheduled condition kept after scheduling")
		}
	})

	t.Run("image pull error", func(t *testing.T) {
		vmi := &virtv1.VirtualMachineInstance{}
		vmi.Status.Phase = virtv1.Scheduling
		pod := makePod(podRunningNotReady)
		pod.Status.Phase = corev1.PodPending
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "compute", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "back-off"}}}}
		st := desiredStatus(vmi, pod, nil, nil, now)
		c := findCond(st, vmiutil.SynchronizedCondition)
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ImagePullBackOff" {
			t.Errorf("Synchronized condition %+v", c)
		}
		vmi.Status = st
		st = desiredStatus(vmi, makePod(podRunningNotReady), nil, nil, now)
		if findCond(st, vmiutil.SynchronizedCondition) != nil {
			t.Error("Synchronized condition kept after the pull succeeded")
		}
	})

	t.Run("scheduled", func(t *testing.T) {
		vmi := &virtv1.VirtualMachineInstance{}
		vmi.Status.Phase = virtv1.Scheduling
		pod := makePod(podReady)
		st := desiredStatus(vmi, pod, []corev1.Pod{*pod}, nil, now)
		if st.Phase != virtv1.Scheduled || st.NodeName != "node-1" {
			t.Errorf("phase %q node %q", st.Phase, st.NodeName)
		}
		if st.ActivePods["pod-uid"] != "node-1" {
			t.Errorf("activePods %v", st.ActivePods)
		}
		if len(st.PhaseTransitionTimestamps) != 1 || st.PhaseTransitionTimestamps[0].Phase != virtv1.Scheduled || !st.PhaseTransitionTimestamps[0].PhaseTransitionTimestamp.Equal(&now) {
			t.Errorf("timestamps %v", st.PhaseTransitionTimestamps)
		}
	})

	t.Run("node agent fields survive", func(t *testing.T) {
		vmi := &virtv1.VirtualMachineInstance{}
		vmi.Status.Phase = virtv1.Running
		vmi.Status.NodeName = "node-1"
		vmi.Status.Interfaces = []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.2"}}
		vmi.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}
		pod := makePod(podReady)
		vmi.Status.ActivePods = activePods(nil, []corev1.Pod{*pod})
		st := desiredStatus(vmi, pod, []corev1.Pod{*pod}, nil, now)
		if st.Phase != virtv1.Running || len(st.Interfaces) != 1 || len(st.Conditions) != 1 || st.NodeName != "node-1" {
			t.Errorf("node agent status changed: %+v", st)
		}
	})
}

func findCond(st virtv1.VirtualMachineInstanceStatus, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}
