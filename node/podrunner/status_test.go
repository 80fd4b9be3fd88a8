package podrunner

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

func condition(st corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func TestRunStatus(t *testing.T) {
	pod := renderedPod()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	run := podRun{HostIP: "127.0.0.1", PodIPs: []string{"10.244.1.5"}, StartedAt: t0, ImageIDs: map[string]string{"volumecontainerdisk": "localhost/qvirt/tiny-disk@sha256:ab"}}
	st := runStatus(pod, run, t0)
	if st.Phase != corev1.PodRunning || st.PodIP != "10.244.1.5" || len(st.PodIPs) != 1 || st.HostIP != "127.0.0.1" || st.StartTime == nil {
		t.Fatalf("running status: %+v", st)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodReadyToStartContainers} {
		if c := condition(st, ct); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("condition %s = %+v, want True", ct, c)
		}
	}
	if len(st.ContainerStatuses) != 3 {
		t.Fatalf("container statuses: %+v", st.ContainerStatuses)
	}
	for _, cs := range st.ContainerStatuses {
		if cs.State.Running == nil || !cs.Ready || cs.State.Running.StartedAt.Time != t0.Truncate(time.Second) {
			t.Errorf("container %s: %+v", cs.Name, cs)
		}
	}
	if st.ContainerStatuses[1].ImageID != "localhost/qvirt/tiny-disk@sha256:ab" {
		t.Errorf("image ID %q", st.ContainerStatuses[1].ImageID)
	}

	// Building again from the written status changes nothing, later too: no rewrite loops.
	pod.Status = st
	if again := runStatus(pod, run, t0.Add(time.Minute)); !equality.Semantic.DeepEqual(again, st) {
		t.Errorf("rebuilding changed the status:\n%+v\n%+v", again, st)
	}

	run.Exit = &exitInfo{Code: 2, Reason: ReasonError, Message: "boom", FinishedAt: t0.Add(time.Hour)}
	failed := runStatus(pod, run, t0.Add(time.Hour))
	if failed.Phase != corev1.PodFailed {
		t.Errorf("phase %s, want Failed", failed.Phase)
	}
	if c := condition(failed, corev1.PodReady); c.Status != corev1.ConditionFalse || !c.LastTransitionTime.Time.Equal(t0.Add(time.Hour).Truncate(time.Second)) {
		t.Errorf("Ready after exit: %+v", c)
	}
	if c := condition(failed, corev1.PodScheduled); !c.LastTransitionTime.Time.Equal(t0.Truncate(time.Second)) {
		t.Errorf("PodScheduled transition time moved: %+v", c)
	}
	compute := failed.ContainerStatuses[0].State.Terminated
	if compute == nil || compute.ExitCode != 2 || compute.Reason != ReasonError || compute.Message != "boom" {
		t.Errorf("compute: %+v", failed.ContainerStatuses[0])
	}
	if other := failed.ContainerStatuses[1].State.Terminated; other == nil || other.ExitCode != 0 || other.Reason != ReasonCompleted {
		t.Errorf("volume container: %+v", failed.ContainerStatuses[1])
	}
	run.Exit.Code = 0
	if ok := runStatus(pod, run, t0.Add(time.Hour)); ok.Phase != corev1.PodSucceeded {
		t.Errorf("exit 0: phase %s", ok.Phase)
	}
}

func TestWaitingStatus(t *testing.T) {
	pod := renderedPod()
	st := waitingStatus(pod, "127.0.0.1", map[string]corev1.ContainerStateWaiting{
		"volumecontainerdisk": {Reason: ReasonErrImagePull, Message: "not there"},
	}, time.Now())
	if st.Phase != corev1.PodPending || st.PodIP != "" {
		t.Fatalf("status %+v", st)
	}
	got := map[string]string{}
	for _, cs := range st.ContainerStatuses {
		got[cs.Name] = cs.State.Waiting.Reason
	}
	want := map[string]string{ComputeContainer: ReasonContainerCreating, "volumecontainerdisk": ReasonErrImagePull, "kernel-boot": ReasonContainerCreating}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("waiting reasons %v, want %v", got, want)
	}
	if c := condition(st, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != reasonContainersNotRdy {
		t.Errorf("Ready: %+v", c)
	}
}

func TestLostStatus(t *testing.T) {
	pod := renderedPod()
	pod.Status.Phase = corev1.PodRunning
	st := lostStatus(pod, "127.0.0.1", time.Now())
	if st.Phase != corev1.PodFailed || st.ContainerStatuses[0].State.Terminated.Reason != ReasonStatusUnknown {
		t.Errorf("lost: %+v", st)
	}
}
