package vmi

import (
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// SetupWithManager registers the controller. extra handlers see every VMI
// event without enqueueing anything (the phase-transition metric uses one).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int, extra ...handler.TypedEventHandler[*virtv1.VirtualMachineInstance, reconcile.Request]) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachineinstance").
		For(&virtv1.VirtualMachineInstance{}).
		// Pods are mapped to their controlling VMI, migration targets included.
		Owns(&corev1.Pod{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers})
	for _, h := range extra {
		b = b.WatchesRawSource(source.Kind(mgr.GetCache(), &virtv1.VirtualMachineInstance{}, h))
	}
	return b.Complete(r)
}
