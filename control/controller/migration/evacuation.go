package migration

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
	"github.com/qvirt/qvirt/control/webhooks"
)

// EvacuationLabel on a migration names the VMI it moves off a node for an eviction.
const EvacuationLabel = "kubevirt.io/evacuation"

// evacuationRetry paces a new migration after one of an evacuation failed.
const evacuationRetry = 10 * time.Second

// Evacuation moves VMIs off the node an eviction named (status.evacuationNodeName, set by
// virt-api's eviction webhook): it creates a migration, again after one fails, until the VMI
// runs elsewhere, and then clears the mark. VMIs whose strategy is External are left to the
// external controller.
type Evacuation struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Namespace holds the KubeVirt CR, whose evictionStrategy is the cluster's default.
	Namespace string
	Now       func() time.Time
}

// SetupWithManager registers the controller; the migration controller's index must be in
// place (Reconciler.SetupWithManager).
func (e *Evacuation) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("evacuation").
		For(&virtv1.VirtualMachineInstance{}).
		Watches(&virtv1.VirtualMachineInstanceMigration{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			m := o.(*virtv1.VirtualMachineInstanceMigration)
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}}}
		})).
		Complete(e)
}

// Reconcile evacuates one VMI.
func (e *Evacuation) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vmi := &virtv1.VirtualMachineInstance{}
	if err := e.Client.Get(ctx, req.NamespacedName, vmi); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	node := vmi.Status.EvacuationNodeName
	if node == "" || vmi.DeletionTimestamp != nil || vmiutil.IsFinal(vmi) {
		return ctrl.Result{}, nil
	}
	logger := log.FromContext(ctx).WithValues("vmi", vmi.Name, "node", node)
	if vmi.Status.NodeName != node {
		logger.Info("VMI left the evacuated node", "nowOn", vmi.Status.NodeName)
		orig := vmi.DeepCopy()
		vmi.Status.EvacuationNodeName = ""
		return ctrl.Result{}, e.Client.Status().Patch(ctx, vmi, client.MergeFrom(orig))
	}
	cluster, err := e.clusterStrategy(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if webhooks.EffectiveEvictionStrategy(vmi, cluster) == virtv1.EvictionStrategyExternal {
		return ctrl.Result{}, nil
	}
	var list virtv1.VirtualMachineInstanceMigrationList
	if err := e.Client.List(ctx, &list, client.InNamespace(vmi.Namespace), client.MatchingFields{vmiNameField: vmi.Name}); err != nil {
		return ctrl.Result{}, err
	}
	var lastEnd time.Time
	for i := range list.Items {
		m := &list.Items[i]
		if !IsFinal(m) {
			return ctrl.Result{}, nil // a migration is moving it
		}
		for _, ts := range m.Status.PhaseTransitionTimestamps {
			if ts.Phase == virtv1.MigrationFailed && ts.PhaseTransitionTimestamp.After(lastEnd) {
				lastEnd = ts.PhaseTransitionTimestamp.Time
			}
		}
	}
	if wait := lastEnd.Add(evacuationRetry).Sub(e.now()); !lastEnd.IsZero() && wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	mig := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kubevirt-evacuation-", Namespace: vmi.Namespace,
			Labels: map[string]string{EvacuationLabel: vmi.Name}},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
	}
	if err := e.Client.Create(ctx, mig); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			// Refused (the VMI is already moving, or no longer movable): look again later.
			logger.Info("Evacuation migration refused; will retry", "reason", err.Error())
			return ctrl.Result{RequeueAfter: evacuationRetry}, nil
		}
		return ctrl.Result{}, err
	}
	logger.Info("Created an evacuation migration", "migration", mig.Name)
	e.Recorder.Eventf(vmi, mig, corev1.EventTypeNormal, "SuccessfulCreate", "Evacuate", "Created migration %s to move the VMI off node %s", mig.Name, node)
	return ctrl.Result{}, nil
}

func (e *Evacuation) clusterStrategy(ctx context.Context) (virtv1.EvictionStrategy, error) {
	var kvs virtv1.KubeVirtList
	if err := e.Client.List(ctx, &kvs, client.InNamespace(e.Namespace)); err != nil {
		return "", err
	}
	if len(kvs.Items) == 0 {
		return "", nil
	}
	return config.From(&kvs.Items[0], config.VirtController).EvictionStrategy, nil
}

func (e *Evacuation) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}
