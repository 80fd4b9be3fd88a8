package handler

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	crhandler "sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// Labels of launcher pods set by virt-controller.
const (
	launcherLabel = "kubevirt.io"
	vmiNameLabel  = "vm.kubevirt.io/name"
)

// SetupWithManager registers the node agent's controller: VMIs, the launcher pods on this
// node, and wake-ups from launcher events.
func (h *Handler) SetupWithManager(mgr ctrl.Manager) error {
	onNode := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Spec.NodeName == h.opts.NodeName && p.Labels[launcherLabel] == "virt-launcher"
	})
	podToVMI := crhandler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[vmiNameLabel]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("virt-handler").
		For(&v1.VirtualMachineInstance{}).
		Watches(&corev1.Pod{}, podToVMI, builder.WithPredicates(onNode)).
		WatchesRawSource(source.Channel(h.wake, &crhandler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(h)
}
