package vmi

import (
	corev1 "k8s.io/api/core/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

// Reasons written to status.reason (and Events) when the controller fails a VMI.
const (
	ReasonPodMissing          = "LauncherPodMissing"
	ReasonPodFailed           = "LauncherPodFailed"
	ReasonPodDeleted          = "LauncherPodDeleted"
	ReasonDeletedBeforeLaunch = "DeletedBeforeLaunch"
)

// NextPhase decides the phase of vmi given its launcher pod (nil when there is
// none). The controller owns the phases up to Scheduled; from there the node
// agent moves the VMI on, and the controller only fails it when the launcher
// is gone or failed, which the node agent cannot report. A pod that exited
// cleanly is left to the node agent, which knows whether the guest shut down.
func NextPhase(vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod) (phase virtv1.VirtualMachineInstancePhase, reason string) {
	deleting := vmi.DeletionTimestamp != nil
	cur := vmi.Status.Phase
	switch cur {
	case virtv1.VmPhaseUnset, virtv1.Pending:
		switch {
		case pod != nil:
			return virtv1.Scheduling, ""
		case deleting:
			return virtv1.Failed, ReasonDeletedBeforeLaunch
		default:
			return virtv1.Pending, ""
		}
	case virtv1.Scheduling:
		switch {
		case pod == nil:
			return virtv1.Failed, ReasonPodMissing
		case vmiutil.PodDone(pod):
			return virtv1.Failed, ReasonPodFailed
		case pod.DeletionTimestamp != nil:
			return virtv1.Failed, ReasonPodDeleted
		case vmiutil.PodReady(pod) && !deleting:
			return virtv1.Scheduled, ""
		default:
			return virtv1.Scheduling, ""
		}
	case virtv1.Scheduled, virtv1.Running:
		switch {
		case pod == nil && deleting:
			// The node agent did not report the end in time; as in KubeVirt the
			// VMI ends Failed, with the deletion as the reason.
			return virtv1.Failed, ReasonPodDeleted
		case pod == nil:
			return virtv1.Failed, ReasonPodMissing
		case pod.Status.Phase == corev1.PodFailed:
			return virtv1.Failed, ReasonPodFailed
		case pod.DeletionTimestamp != nil && !deleting:
			// Someone deleted the launcher pod (not the VMI): its guest is being shut down
			// without the VMI asking for it, which KubeVirt reports as a failure, so that
			// runStrategy Always and RerunOnFailure start it again.
			return virtv1.Failed, ReasonPodDeleted
		}
	}
	return cur, ""
}

// imagePullReasons are container waiting reasons surfaced on the VMI so that the
// VM shows ErrImagePull / ImagePullBackOff.
var imagePullReasons = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true}

// imageError returns the waiting reason and message of the first container that
// cannot pull its image.
func imageError(pod *corev1.Pod) (reason, message string) {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && imagePullReasons[w.Reason] {
			return w.Reason, w.Message
		}
	}
	return "", ""
}
