package migration

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

// vmiNameField indexes migrations by the VMI they move.
const vmiNameField = "spec.vmiName"

// SetupWithManager registers the controller with one worker (see Reconciler).
// extra handlers see every migration event without enqueueing anything (the phase-transition
// metric uses one).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, extra ...handler.TypedEventHandler[*virtv1.VirtualMachineInstanceMigration, reconcile.Request]) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &virtv1.VirtualMachineInstanceMigration{}, vmiNameField, func(o client.Object) []string {
		return []string{o.(*virtv1.VirtualMachineInstanceMigration).Spec.VMIName}
	}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachineinstancemigration").
		For(&virtv1.VirtualMachineInstanceMigration{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToMigration)).
		Watches(&virtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(r.vmiToMigrations)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1})
	for _, h := range extra {
		b = b.WatchesRawSource(source.Kind(mgr.GetCache(), &virtv1.VirtualMachineInstanceMigration{}, h))
	}
	return b.Complete(r)
}

// podToMigration maps a target pod to its migration by the name annotation,
// which outlives the migration object (its UID alone could not be resolved).
func podToMigration(_ context.Context, o client.Object) []reconcile.Request {
	if _, ok := o.GetLabels()[virtv1.MigrationJobLabel]; !ok {
		return nil
	}
	name := o.GetAnnotations()[launcherpod.MigrationJobNameAnnotation]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

func (r *Reconciler) vmiToMigrations(ctx context.Context, o client.Object) []reconcile.Request {
	var list virtv1.VirtualMachineInstanceMigrationList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{vmiNameField: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Listing migrations of a VMI", "vmi", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}
