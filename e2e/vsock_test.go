package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// TestVSOCKWithoutTheHostDeviceSaysSo: with the VSOCK feature gate on, a VMI with
// autoattachVSOCK gets a context ID from virt-controller, and on these nodes, which have no
// /dev/vhost-vsock, the node agent fails it with a message that says why. Without the gate the
// webhook refuses it.
func TestVSOCKWithoutTheHostDeviceSaysSo(t *testing.T) {
	c := localStack(t)
	kvc := kv(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var m v1.VirtualMachine
	if err := yaml.Unmarshal([]byte(vmManifest("vsock", "", "masquerade")), &m); err != nil {
		t.Fatal(err)
	}
	on := true
	newVMI := func() *v1.VirtualMachineInstance {
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vsock"}, Spec: *m.Spec.Template.Spec.DeepCopy()}
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
	var vmi v1.VirtualMachineInstance
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := kvc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "vsock"}, &vmi); err != nil {
			return false, nil
		}
		return vmi.Status.Phase == v1.Failed, nil
	}); err != nil {
		t.Fatalf("VMI phase %s, want Failed; conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
	}
	if cid := vmi.Status.VSOCKCID; cid == nil || *cid < 3 {
		t.Errorf("VSOCKCID %v, want an assigned context ID", cid)
	}
	ready := condition(&vmi, v1.VirtualMachineInstanceReady)
	if ready == nil || ready.Status != corev1.ConditionFalse || !strings.Contains(ready.Message, "has no /dev/vhost-vsock") {
		t.Errorf("Ready condition %+v, want one naming the missing /dev/vhost-vsock", ready)
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
