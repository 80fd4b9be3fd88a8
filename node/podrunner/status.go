package podrunner

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons the runner puts in container states, as a kubelet would.
const (
	ReasonErrImagePull      = "ErrImagePull"
	ReasonContainerCreating = "ContainerCreating"
	ReasonCreateError       = "CreateContainerError"
	ReasonUnsupported       = "Unsupported"
	ReasonCompleted         = "Completed"
	ReasonError             = "Error"
	ReasonStatusUnknown     = "ContainerStatusUnknown"
	reasonPodCompleted      = "PodCompleted"
	reasonContainersNotRdy  = "ContainersNotReady"
)

// exitInfo is how the launcher ended.
type exitInfo struct {
	Code       int       `json:"code"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message,omitempty"`
	FinishedAt time.Time `json:"finishedAt"`
}

// podRun is what a running or finished pod's status is built from.
type podRun struct {
	HostIP    string
	PodIPs    []string
	StartedAt time.Time
	Exit      *exitInfo // nil while the launcher runs
	// ImageIDs are repository@digest of the VM images, by container name.
	ImageIDs map[string]string
}

// apiTime drops what the API does not keep, so that a status read back compares equal.
func apiTime(t time.Time) metav1.Time { return metav1.NewTime(t).Rfc3339Copy() }

// runStatus is the status of a pod whose sandbox exists: Running, or Succeeded/Failed once the
// launcher has exited. The other containers stand for KubeVirt's volume containers: they run
// while the launcher does and complete with it.
func runStatus(pod *corev1.Pod, run podRun, now time.Time) corev1.PodStatus {
	st := baseStatus(pod, run.HostIP, now)
	st.PodIP, st.PodIPs = "", nil
	if len(run.PodIPs) > 0 {
		st.PodIP = run.PodIPs[0]
		for _, ip := range run.PodIPs {
			st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	started := apiTime(run.StartedAt)
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{
			Name:        c.Name,
			Image:       c.Image,
			ImageID:     run.ImageIDs[c.Name],
			ContainerID: containerID(pod, c.Name),
		}
		if run.Exit == nil {
			t := true
			cs.Ready, cs.Started = true, &t
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: started}
		} else {
			f := false
			cs.Started = &f
			term := &corev1.ContainerStateTerminated{ExitCode: 0, Reason: ReasonCompleted, StartedAt: started, FinishedAt: apiTime(run.Exit.FinishedAt), ContainerID: cs.ContainerID}
			if c.Name == ComputeContainer {
				term.ExitCode, term.Reason, term.Message = int32(run.Exit.Code), run.Exit.Reason, run.Exit.Message
			}
			cs.State.Terminated = term
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}

	switch {
	case run.Exit == nil:
		st.Phase = corev1.PodRunning
		setCondition(&st, corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", "", now)
		setCondition(&st, corev1.ContainersReady, corev1.ConditionTrue, "", "", now)
		setCondition(&st, corev1.PodReady, corev1.ConditionTrue, "", "", now)
	default:
		st.Phase = corev1.PodSucceeded
		if run.Exit.Code != 0 {
			st.Phase = corev1.PodFailed
		}
		setCondition(&st, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", "", now)
		setCondition(&st, corev1.ContainersReady, corev1.ConditionFalse, reasonPodCompleted, "", now)
		setCondition(&st, corev1.PodReady, corev1.ConditionFalse, reasonPodCompleted, "", now)
	}
	return st
}

// waitingStatus is the status of a pod that cannot start yet (or ever): Pending, with each
// container waiting for the reason given for it, else ContainerCreating.
func waitingStatus(pod *corev1.Pod, hostIP string, waiting map[string]corev1.ContainerStateWaiting, now time.Time) corev1.PodStatus {
	st := baseStatus(pod, hostIP, now)
	st.Phase = corev1.PodPending
	st.PodIP, st.PodIPs = "", nil
	st.ContainerStatuses = nil
	var names []string
	for _, c := range pod.Spec.Containers {
		w, ok := waiting[c.Name]
		if !ok {
			w = corev1.ContainerStateWaiting{Reason: ReasonContainerCreating}
		}
		f := false
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Started: &f,
			State: corev1.ContainerState{Waiting: &w},
		})
		names = append(names, c.Name)
	}
	sort.Strings(names)
	msg := fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	setCondition(&st, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", "", now)
	setCondition(&st, corev1.ContainersReady, corev1.ConditionFalse, reasonContainersNotRdy, msg, now)
	setCondition(&st, corev1.PodReady, corev1.ConditionFalse, reasonContainersNotRdy, msg, now)
	return st
}

// lostStatus is for a pod the API believes running that this node knows nothing of (its state
// was lost): Failed, as a kubelet reports containers it cannot find.
func lostStatus(pod *corev1.Pod, hostIP string, now time.Time) corev1.PodStatus {
	run := podRun{HostIP: hostIP, StartedAt: now, Exit: &exitInfo{
		Code: 137, Reason: ReasonStatusUnknown, FinishedAt: now,
		Message: "The container could not be located when the pod was terminated",
	}}
	if pod.Status.StartTime != nil {
		run.StartedAt = pod.Status.StartTime.Time
	}
	return runStatus(pod, run, now)
}

func baseStatus(pod *corev1.Pod, hostIP string, now time.Time) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	if st.StartTime == nil {
		t := apiTime(now)
		st.StartTime = &t
	}
	setCondition(&st, corev1.PodScheduled, corev1.ConditionTrue, "", "", now)
	setCondition(&st, corev1.PodInitialized, corev1.ConditionTrue, "", "", now)
	return st
}

// setCondition sets a condition, keeping its transition time when its status does not change.
func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, s corev1.ConditionStatus, reason, msg string, now time.Time) {
	c := corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: apiTime(now)}
	for i := range st.Conditions {
		if st.Conditions[i].Type != t {
			continue
		}
		if st.Conditions[i].Status == s {
			c.LastTransitionTime = st.Conditions[i].LastTransitionTime
		}
		c.LastProbeTime = st.Conditions[i].LastProbeTime
		c.ObservedGeneration = st.Conditions[i].ObservedGeneration
		st.Conditions[i] = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

func containerID(pod *corev1.Pod, name string) string {
	return "qvirt://" + string(pod.UID) + "/" + name
}
