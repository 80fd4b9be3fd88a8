package operator

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// KubeVirt's condition reasons.
const (
	reasonCreated       = "AllResourcesCreated"
	reasonReady         = "AllComponentsReady"
	reasonDeploying     = "DeploymentInProgress"
	reasonUpdating      = "UpdateInProgress"
	reasonDeleting      = "DeletionInProgress"
	reasonFailed        = "DeploymentFailed"
	reasonDeleteBlocked = "DeletionFailedExistingWorkloads"
)

// ready reports whether every Deployment and DaemonSet of objs runs its current template on
// all its replicas, and if not, which is behind. objs carry the generation just applied: a
// cached copy older than that counts as behind.
func (r *Reconciler) ready(ctx context.Context, objs []*unstructured.Unstructured) (bool, string, error) {
	var behind []string
	for _, o := range objs {
		key := client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			if err := r.Client.Get(ctx, key, d); err != nil {
				if apierrors.IsNotFound(err) {
					behind = append(behind, "deployment "+o.GetName()+" is not there yet")
					continue
				}
				return false, "", err
			}
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			if d.Generation < o.GetGeneration() || d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want || d.Status.Replicas > want {
				behind = append(behind, fmt.Sprintf("deployment %s has %d of %d replicas updated and available", d.Name, min(d.Status.UpdatedReplicas, d.Status.AvailableReplicas), want))
			}
		case "DaemonSet":
			d := &appsv1.DaemonSet{}
			if err := r.Client.Get(ctx, key, d); err != nil {
				if apierrors.IsNotFound(err) {
					behind = append(behind, "daemonset "+o.GetName()+" is not there yet")
					continue
				}
				return false, "", err
			}
			want := d.Status.DesiredNumberScheduled
			if d.Generation < o.GetGeneration() || d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedNumberScheduled < want || d.Status.NumberAvailable < want {
				behind = append(behind, fmt.Sprintf("daemonset %s has %d of %d pods updated and available", d.Name, min(d.Status.UpdatedNumberScheduled, d.Status.NumberAvailable), want))
			}
		}
	}
	return len(behind) == 0, strings.Join(behind, "; "), nil
}

// deployed is the status of an installation whose objects are all applied.
func deployed(kv *v1.KubeVirt, target, operator string, ready bool, why string) v1.KubeVirtStatus {
	st := *kv.Status.DeepCopy()
	st.TargetKubeVirtVersion, st.OperatorVersion = target, operator
	st.ObservedGeneration = &kv.Generation
	setCondition(&st, v1.KubeVirtConditionCreated, corev1.ConditionTrue, reasonCreated, "All resources were created.")
	if ready {
		st.ObservedKubeVirtVersion = target
		st.Phase = v1.KubeVirtPhaseDeployed
		setCondition(&st, v1.KubeVirtConditionAvailable, corev1.ConditionTrue, reasonReady, "All components are ready.")
		setCondition(&st, v1.KubeVirtConditionProgressing, corev1.ConditionFalse, reasonReady, "All components are ready.")
		setCondition(&st, v1.KubeVirtConditionDegraded, corev1.ConditionFalse, reasonReady, "All components are ready.")
		return st
	}
	if st.Phase != v1.KubeVirtPhaseDeployed || st.ObservedKubeVirtVersion == "" {
		st.Phase = v1.KubeVirtPhaseDeploying
		setCondition(&st, v1.KubeVirtConditionAvailable, corev1.ConditionFalse, reasonDeploying, "Deploying version "+target+": "+why+".")
		setCondition(&st, v1.KubeVirtConditionProgressing, corev1.ConditionTrue, reasonDeploying, "Deploying version "+target+": "+why+".")
		setCondition(&st, v1.KubeVirtConditionDegraded, corev1.ConditionFalse, reasonDeploying, "Deploying version "+target+".")
		return st
	}
	// Installed once: an update, or a component lost and being put back.
	reason, msg := reasonUpdating, "Updating from version "+st.ObservedKubeVirtVersion+" to "+target+": "+why+"."
	if st.ObservedKubeVirtVersion == target {
		reason, msg = reasonDeploying, "Restoring components: "+why+"."
	}
	setCondition(&st, v1.KubeVirtConditionAvailable, corev1.ConditionFalse, reason, msg)
	setCondition(&st, v1.KubeVirtConditionProgressing, corev1.ConditionTrue, reason, msg)
	setCondition(&st, v1.KubeVirtConditionDegraded, corev1.ConditionTrue, reason, msg)
	return st
}

// failed is the status of an installation the operator could not apply.
func failed(kv *v1.KubeVirt, target string, err error) v1.KubeVirtStatus {
	st := *kv.Status.DeepCopy()
	st.TargetKubeVirtVersion = target
	st.ObservedGeneration = &kv.Generation
	if st.Phase == "" {
		st.Phase = v1.KubeVirtPhaseDeploying
	}
	setCondition(&st, v1.KubeVirtConditionDegraded, corev1.ConditionTrue, reasonFailed, err.Error())
	setCondition(&st, v1.KubeVirtConditionProgressing, corev1.ConditionTrue, reasonFailed, err.Error())
	return st
}

// refused is the status of a CR the operator does not act on.
func refused(kv *v1.KubeVirt, reason, msg string) v1.KubeVirtStatus {
	st := *kv.Status.DeepCopy()
	st.ObservedGeneration = &kv.Generation
	if st.Phase == "" {
		st.Phase = v1.KubeVirtPhaseDeploying
	}
	setCondition(&st, v1.KubeVirtConditionDegraded, corev1.ConditionTrue, reason, msg)
	setCondition(&st, v1.KubeVirtConditionAvailable, corev1.ConditionFalse, reason, msg)
	return st
}

// deleting is the status of a CR being uninstalled; blocked names what holds it.
func deleting(kv *v1.KubeVirt, blocked string) v1.KubeVirtStatus {
	st := *kv.Status.DeepCopy()
	st.Phase = v1.KubeVirtPhaseDeleting
	if blocked != "" {
		setCondition(&st, v1.KubeVirtConditionDegraded, corev1.ConditionTrue, reasonDeleteBlocked, blocked)
		return st
	}
	setCondition(&st, v1.KubeVirtConditionAvailable, corev1.ConditionFalse, reasonDeleting, "Deleting the installation.")
	setCondition(&st, v1.KubeVirtConditionProgressing, corev1.ConditionTrue, reasonDeleting, "Deleting the installation.")
	setCondition(&st, v1.KubeVirtConditionDegraded, corev1.ConditionFalse, reasonDeleting, "Deleting the installation.")
	return st
}

// setCondition sets a condition; its times move only when its status does.
func setCondition(st *v1.KubeVirtStatus, t v1.KubeVirtConditionType, status corev1.ConditionStatus, reason, msg string) {
	now := metav1.Now()
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime, c.LastProbeTime = now, now
		}
		c.Status, c.Reason, c.Message = status, reason, msg
		return
	}
	st.Conditions = append(st.Conditions, v1.KubeVirtCondition{Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: now, LastProbeTime: now})
}

// setStatus writes st when it differs from the CR's.
func (r *Reconciler) setStatus(ctx context.Context, kv *v1.KubeVirt, st v1.KubeVirtStatus) error {
	if equality.Semantic.DeepEqual(kv.Status, st) {
		return nil
	}
	orig := kv.DeepCopy()
	kv.Status = st
	// A merge patch: the status is the operator's alone, and a cached copy a write behind must
	// not fail the round.
	return r.Client.Status().Patch(ctx, kv, client.MergeFrom(orig))
}
