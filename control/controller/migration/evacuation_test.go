package migration

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func evacuationFixture(t *testing.T, vmi *virtv1.VirtualMachineInstance) (*Evacuation, client.Client) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = virtv1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(vmi).
		WithStatusSubresource(&virtv1.VirtualMachineInstance{}, &virtv1.VirtualMachineInstanceMigration{}).
		WithIndex(&virtv1.VirtualMachineInstanceMigration{}, vmiNameField, func(o client.Object) []string {
			return []string{o.(*virtv1.VirtualMachineInstanceMigration).Spec.VMIName}
		}).Build()
	return &Evacuation{Client: c, Recorder: events.NewFakeRecorder(10), Namespace: "kubevirt"}, c
}

func evacuate(t *testing.T, e *Evacuation, c client.Client) []virtv1.VirtualMachineInstanceMigration {
	t.Helper()
	if _, err := e.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "v"}}); err != nil {
		t.Fatal(err)
	}
	var list virtv1.VirtualMachineInstanceMigrationList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestEvacuation: a VMI marked to leave its node gets one migration at a time, and its mark
// is cleared once it runs elsewhere; External leaves the move to someone else.
func TestEvacuation(t *testing.T) {
	vmi := runningVMI("v", "n1")
	vmi.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrate)
	vmi.Status.EvacuationNodeName = "n1"
	e, c := evacuationFixture(t, vmi)
	migs := evacuate(t, e, c)
	if len(migs) != 1 || migs[0].Spec.VMIName != "v" || migs[0].Labels[EvacuationLabel] != "v" {
		t.Fatalf("migrations %+v, want one evacuation of v", migs)
	}
	if migs = evacuate(t, e, c); len(migs) != 1 {
		t.Fatalf("%d migrations while one is in flight", len(migs))
	}

	cur := &virtv1.VirtualMachineInstance{}
	_ = c.Get(context.Background(), client.ObjectKeyFromObject(vmi), cur)
	cur.Status.NodeName = "n2"
	if err := c.Status().Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	evacuate(t, e, c)
	_ = c.Get(context.Background(), client.ObjectKeyFromObject(vmi), cur)
	if cur.Status.EvacuationNodeName != "" {
		t.Errorf("evacuationNodeName %q after the VMI moved", cur.Status.EvacuationNodeName)
	}

	ext := runningVMI("v", "n1")
	ext.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyExternal)
	ext.Status.EvacuationNodeName = "n1"
	e, c = evacuationFixture(t, ext)
	if migs := evacuate(t, e, c); len(migs) != 0 {
		t.Errorf("External: %d migrations, want none", len(migs))
	}
}
