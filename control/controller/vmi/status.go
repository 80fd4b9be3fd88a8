package vmi

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

// Reasons of the Synchronized condition set by this controller.
const (
	ReasonFailedCreate = "FailedCreate"
	ReasonFailedDelete = "FailedDelete"
)

// syncFailure is a setup error to report on the VMI.
type syncFailure struct {
	Reason  string
	Message string
}

// desiredStatus is the status vmi should have given its launcher pod (nil if
// none), all its pods (migration targets included) and a setup failure of
// this round. It only touches what the controller owns, so that it never
// undoes what the node agent wrote.
func desiredStatus(vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod, pods []corev1.Pod, fail *syncFailure, now metav1.Time) virtv1.VirtualMachineInstanceStatus {
	st := *vmi.Status.DeepCopy()
	cur := vmi.Status.Phase
	phase, reason := NextPhase(vmi, pod)

	// Scheduling details matter only until the pod runs.
	if vmiutil.IsUnprocessed(vmi) || cur == virtv1.Scheduling {
		if pod != nil {
			syncQOS(&st, pod)
			syncPodScheduled(&st, pod)
			if r, msg := imageError(pod); r != "" && fail == nil {
				fail = &syncFailure{Reason: r, Message: msg}
			}
		}
		if fail != nil {
			vmiutil.SetCondition(&st, virtv1.VirtualMachineInstanceCondition{
				Type: vmiutil.SynchronizedCondition, Status: corev1.ConditionFalse,
				Reason: fail.Reason, Message: fail.Message, LastTransitionTime: now,
			})
		} else {
			vmiutil.RemoveCondition(&st, vmiutil.SynchronizedCondition)
		}
	}

	if phase == virtv1.Scheduled && cur != virtv1.Scheduled {
		st.NodeName = pod.Spec.NodeName
	}
	st.ActivePods = activePods(vmi.Status.ActivePods, pods)

	if phase != cur {
		st.Phase = phase
		if reason != "" {
			st.Reason = reason
		}
		st.PhaseTransitionTimestamps = append(st.PhaseTransitionTimestamps, virtv1.VirtualMachineInstancePhaseTransitionTimestamp{
			Phase: phase, PhaseTransitionTimestamp: now,
		})
	}
	return st
}

func syncQOS(st *virtv1.VirtualMachineInstanceStatus, pod *corev1.Pod) {
	if pod.Status.QOSClass == "" {
		st.QOSClass = nil
		return
	}
	q := pod.Status.QOSClass
	st.QOSClass = &q
}

// syncPodScheduled mirrors a failing PodScheduled condition of the pod, as
// KubeVirt does: an unschedulable VMI shows why.
func syncPodScheduled(st *virtv1.VirtualMachineInstanceStatus, pod *corev1.Pod) {
	pc := vmiutil.PodCondition(pod, corev1.PodScheduled)
	if pc == nil || pc.Status != corev1.ConditionFalse {
		vmiutil.RemoveCondition(st, virtv1.VirtualMachineInstancePodScheduled)
		return
	}
	vmiutil.SetCondition(st, virtv1.VirtualMachineInstanceCondition{
		Type:               virtv1.VirtualMachineInstancePodScheduled,
		Status:             pc.Status,
		Reason:             pc.Reason,
		Message:            pc.Message,
		LastProbeTime:      pc.LastProbeTime,
		LastTransitionTime: pc.LastTransitionTime,
	})
}

// activePods maps the UID of every pod bound to a node that has not ended to that node;
// during a migration there are two.
func activePods(old map[types.UID]string, pods []corev1.Pod) map[types.UID]string {
	m := map[types.UID]string{}
	for i := range pods {
		if n := pods[i].Spec.NodeName; n != "" && !vmiutil.PodDone(&pods[i]) {
			m[pods[i].UID] = n
		}
	}
	if len(m) == 0 {
		return nil
	}
	if maps.Equal(m, old) {
		return old
	}
	return m
}
