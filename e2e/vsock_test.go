package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
	"github.com/qvirt/qvirt/node/deviceplugin"
)

// TestVSOCKWithoutTheHostDeviceSaysSo: with the VSOCK feature gate on, a VMI with
// autoattachVSOCK gets a context ID from virt-controller and its launcher pod requests
// devices.kubevirt.io/vhost-vsock, which the node agents offer while the gate is on. These nodes
// have no /dev/vhost-vsock, so none has a unit to give and the VMI stays unscheduled with the
// scheduler's reason. Without the gate the webhook refuses it.
func TestVSOCKWithoutTheHostDeviceSaysSo(t *testing.T) {
	if _, err := os.Stat(deviceplugin.VhostVsock.Path); err == nil {
		t.Skip("this machine has /dev/vhost-vsock: its nodes can run the VM")
	}
	c := localStack(t)
	kvc := kv(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	on := true
	newVMI := func() *v1.VirtualMachineInstance {
		vmi := newTinyVMI(t, "vsock")
		vmi.Spec.Domain.Devices.AutoattachVSOCK = &on
		return vmi
	}
	t.Cleanup(func() { _ = kvc.Delete(context.Background(), newVMI()) })

	if err := kvc.Create(ctx, newVMI()); err == nil || !strings.Contains(err.Error(), "VSOCK feature gate is not enabled in kubevirt-config") {
		t.Fatalf("without the gate: %v", err)
	}
	setGates(t, kvc, `["VSOCK"]`)
	t.Cleanup(func() { setGates(t, kvc, "null") })
	// virt-api sees the gate once its watch delivers the CR.
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		err := kvc.Create(ctx, newVMI())
		return err == nil || apierrors.IsAlreadyExists(err), nil
	}); err != nil {
		t.Fatal("the VMI is still refused with the VSOCK gate on")
	}
	kube := c.Kube
	// The node agents start offering vhost-vsock (zero units here) once they see the gate.
	res := corev1.ResourceName(deviceplugin.VhostVsock.ResourceName())
	for _, name := range e2eNodes {
		if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			capacity, alloc := n.Status.Capacity[res], n.Status.Allocatable[res]
			return capacity.Value() == deviceplugin.DefaultCount && alloc.Value() == 0, nil
		}); err != nil {
			t.Fatalf("node %s never listed %s with no units allocatable", name, res)
		}
	}
	var vmi v1.VirtualMachineInstance
	var cond *v1.VirtualMachineInstanceCondition
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "vsock"}, &vmi); err != nil {
			return false, nil
		}
		cond = condition(&vmi, v1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		return cond != nil && cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, "Insufficient "+string(res)), nil
	}); err != nil {
		t.Fatalf("VMI phase %s, PodScheduled %+v: want unschedulable for lack of %s", vmi.Status.Phase, cond, res)
	}
	if cid := vmi.Status.VSOCKCID; cid == nil || *cid < 3 {
		t.Errorf("VSOCKCID %v, want an assigned context ID", cid)
	}
}

// setGates sets the KubeVirt CR's feature gates (a JSON list, or null for none).
func setGates(t *testing.T, kvc client.Client, gates string) {
	t.Helper()
	kvObj := &v1.KubeVirt{}
	kvObj.Namespace, kvObj.Name = localcluster.Namespace, "kubevirt"
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"configuration":{"developerConfiguration":{"featureGates":`+gates+`}}}}`))
	if err := kvc.Patch(context.Background(), kvObj, patch); err != nil {
		t.Fatalf("KubeVirt CR featureGates %s: %v", gates, err)
	}
}
