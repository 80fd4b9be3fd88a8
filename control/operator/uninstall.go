package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/operator/install"
)

// uninstallMessage is KubeVirt's, for a deletion that workloads block.
const uninstallMessage = "Rejecting the uninstall request, since there are still %s present. Either delete all KubeVirt related workloads or change the uninstall strategy before uninstalling KubeVirt."

// blocks reports whether the CR's uninstall strategy keeps it while workloads exist
// (BlockUninstallIfWorkloadsExist, KubeVirt's default).
func blocks(kv *v1.KubeVirt) bool {
	set, _ := SettingsOf(kv, "", "", "")
	return set.BlockUninstall
}

// workloads names the kind of workload that still exists anywhere, or "".
func (r *Reconciler) workloads(ctx context.Context) (string, error) {
	kinds := []struct {
		list client.ObjectList
		name string
	}{
		{&v1.VirtualMachineInstanceList{}, "Virtual Machine Instances"},
		{&v1.VirtualMachineList{}, "Virtual Machines"},
	}
	for _, k := range kinds {
		if err := r.Reader.List(ctx, k.list, client.Limit(1)); err != nil {
			return "", err
		}
		if meta.LenList(k.list) > 0 {
			return k.name, nil
		}
	}
	return "", nil
}

// uninstall removes everything the operator made for kv, then lets the CR go. While
// workloads exist and the strategy blocks, it keeps the installation running and says why.
func (r *Reconciler) uninstall(ctx context.Context, kv *v1.KubeVirt) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(kv, Finalizer) {
		return ctrl.Result{}, nil
	}
	what, err := r.workloads(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if what != "" {
		if blocks(kv) {
			if err := r.setStatus(ctx, kv, deleting(kv, fmt.Sprintf(uninstallMessage, what))); err != nil {
				return ctrl.Result{}, err
			}
			res, err := r.install(ctx, kv) // the workloads still need their components
			res.RequeueAfter = min(res.RequeueAfter, 5*time.Second)
			return res, err
		}
		if err := r.removeWorkloads(ctx); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	}
	if err := r.setStatus(ctx, kv, deleting(kv, "")); err != nil {
		return ctrl.Result{}, err
	}
	objs, err := r.render(kv, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	left, err := r.Applier.Delete(ctx, objs)
	if err != nil {
		return ctrl.Result{}, err
	}
	// What earlier versions installed and this one does not render; what it renders is
	// deleted above, in order.
	older, err := r.prune(ctx, objs)
	if err != nil {
		return ctrl.Result{}, err
	}
	left += older
	sel := metav1.ListOptions{LabelSelector: install.ManagedByLabel + "=" + install.ManagedByValue}
	core := r.Kube.CoreV1()
	if err := core.Secrets(r.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return ctrl.Result{}, err
	}
	if err := core.ConfigMaps(r.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return ctrl.Result{}, err
	}
	if left > 0 {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	logr.FromContextOrDiscard(ctx).Info("Uninstalled")
	controllerutil.RemoveFinalizer(kv, Finalizer)
	return ctrl.Result{}, r.Client.Update(ctx, kv)
}

// removeWorkloads deletes every VM and VMI (uninstallStrategy RemoveWorkloads).
func (r *Reconciler) removeWorkloads(ctx context.Context) error {
	var vms v1.VirtualMachineList
	if err := r.Reader.List(ctx, &vms); err != nil {
		return err
	}
	for i := range vms.Items {
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, &vms.Items[i])); err != nil {
			return err
		}
	}
	var vmis v1.VirtualMachineInstanceList
	if err := r.Reader.List(ctx, &vmis); err != nil {
		return err
	}
	for i := range vmis.Items {
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, &vmis.Items[i])); err != nil {
			return err
		}
	}
	return nil
}
