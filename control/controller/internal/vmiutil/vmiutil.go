// Package vmiutil holds small predicates on VMIs and launcher pods shared by
// the controllers.
package vmiutil

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// SynchronizedCondition is KubeVirt's VMI condition for problems while
// setting the VMI up (pod creation, image pulls). The VM controller reads its
// reason for the ErrImagePull and ImagePullBackOff printable statuses.
const SynchronizedCondition virtv1.VirtualMachineInstanceConditionType = "Synchronized"

// IsFinal reports a VMI that will never run again.
func IsFinal(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.Status.Phase == virtv1.Succeeded || vmi.Status.Phase == virtv1.Failed
}

// IsUnprocessed reports a VMI that has no launcher pod yet.
func IsUnprocessed(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.Status.Phase == virtv1.VmPhaseUnset || vmi.Status.Phase == virtv1.Pending
}

// IsRunning reports a VMI whose guest the node agent reported running.
func IsRunning(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.Status.Phase == virtv1.Running
}

// Condition returns the VMI condition of type t, or nil.
func Condition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

// HasCondition reports whether the VMI has condition t with status s.
func HasCondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType, s corev1.ConditionStatus) bool {
	c := Condition(vmi, t)
	return c != nil && c.Status == s
}

// SetCondition replaces or appends c. The transition time is kept when the
// status did not change, so that rewriting the same condition is a no-op.
func SetCondition(status *virtv1.VirtualMachineInstanceStatus, c virtv1.VirtualMachineInstanceCondition) {
	for i := range status.Conditions {
		old := &status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
			c.LastProbeTime = old.LastProbeTime
		}
		*old = c
		return
	}
	status.Conditions = append(status.Conditions, c)
}

// RemoveCondition drops the condition of type t.
func RemoveCondition(status *virtv1.VirtualMachineInstanceStatus, t virtv1.VirtualMachineInstanceConditionType) {
	status.Conditions = slices.DeleteFunc(status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool { return c.Type == t })
}

// IsMigrating reports a migration in flight as recorded by the node agent.
func IsMigrating(vmi *virtv1.VirtualMachineInstance) bool {
	ms := vmi.Status.MigrationState
	return ms != nil && ms.StartTimestamp != nil && ms.EndTimestamp == nil && !ms.Completed && !ms.Failed
}

// PodCondition returns the pod condition of type t, or nil.
func PodCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// PodReady reports a running pod with a node whose Ready condition is true.
func PodReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
		return false
	}
	c := PodCondition(pod, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// PodDone reports a pod whose containers will not run again.
func PodDone(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// PodDownOrGoingDown reports a pod that is finished or being deleted.
func PodDownOrGoingDown(pod *corev1.Pod) bool {
	return PodDone(pod) || pod.DeletionTimestamp != nil
}

// ActivePod picks the pod that runs the VMI among its launcher pods. A VMI that has migrated
// runs in the pod its migrations name: the target pod once a migration handed it over to its
// target node, the source pod while one runs or after one failed (a second migration's source
// is the first one's target). Before any migration it is the VMI's own pod (not a migration
// target), preferring the one named want.
func ActivePod(vmi *virtv1.VirtualMachineInstance, pods []corev1.Pod, want string) *corev1.Pod {
	if ms := vmi.Status.MigrationState; ms != nil {
		name := ""
		switch {
		case ms.Completed && !ms.Failed && ms.TargetPod != "" && ms.TargetNode == vmi.Status.NodeName:
			name = ms.TargetPod
		case ms.SourcePod != "" && ms.SourceNode == vmi.Status.NodeName:
			name = ms.SourcePod
		}
		if name != "" {
			for i := range pods {
				if p := &pods[i]; p.Name == name && metav1.IsControlledBy(p, vmi) {
					return p
				}
			}
			return nil
		}
	}
	var found *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if IsMigrationTargetPod(p) || !metav1.IsControlledBy(p, vmi) {
			continue
		}
		if found == nil || p.Name == want {
			found = p
		}
	}
	return found
}

// IsMigrationTargetPod reports a pod created for a migration target.
func IsMigrationTargetPod(pod *corev1.Pod) bool {
	_, ok := pod.Labels[virtv1.MigrationJobLabel]
	return ok
}

// ListLauncherPods lists every launcher pod of the VMI with the given UID,
// source and migration targets alike. r may be the cache or an uncached reader.
func ListLauncherPods(ctx context.Context, r client.Reader, namespace string, vmiUID string) ([]corev1.Pod, error) {
	var list corev1.PodList
	err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{
		virtv1.AppLabel:       virtv1.VirtLauncherAppLabelValue,
		virtv1.CreatedByLabel: vmiUID,
	})
	return list.Items, err
}
