package vmi

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func TestCIDsAreUniqueAndStable(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := virtv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	vmi := func(name string, cid *uint32) *virtv1.VirtualMachineInstance {
		v := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
		v.Status.VSOCKCID = cid
		return v
	}
	three, five := uint32(3), uint32(5)
	a, b, c := vmi("a", nil), vmi("b", nil), vmi("c", nil)
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi("has3", &three), vmi("has5", &five), a, b, c).Build()
	ctx := context.Background()
	var cids CIDs
	got := map[string]uint32{}
	for _, v := range []*virtv1.VirtualMachineInstance{a, b, c} {
		cid, err := cids.Allocate(ctx, reader, v)
		if err != nil {
			t.Fatal(err)
		}
		got[v.Name] = cid
	}
	// The lowest free ones, each once, while none is recorded yet.
	if got["a"] != 4 || got["b"] != 6 || got["c"] != 7 {
		t.Errorf("allocated %v, want a=4 b=6 c=7", got)
	}
	// Asked again before its status shows it, a VMI gets the same one.
	if cid, _ := cids.Allocate(ctx, reader, b); cid != 6 {
		t.Errorf("b again: %d, want 6", cid)
	}
	// A VMI that went frees its pending one.
	if err := reader.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	d := vmi("d", nil)
	if err := reader.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	if cid, _ := cids.Allocate(ctx, reader, d); cid != 4 {
		t.Errorf("after a went: %d, want 4", cid)
	}
}
