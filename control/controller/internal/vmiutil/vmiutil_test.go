package vmiutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// TestActivePodFollowsMigrations: the VMI's pod is its own before a migration, the target
// once one handed it over, and stays that pod while a second migration from there runs or
// after it failed; then the second target.
func TestActivePodFollowsMigrations(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "u1"}}
	pod := func(name, node string, target bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{},
			OwnerReferences: []metav1.OwnerReference{{Kind: "VirtualMachineInstance", Name: "vm", UID: "u1", Controller: ptr.To(true)}}}}
		p.Spec.NodeName = node
		if target {
			p.Labels[virtv1.MigrationJobLabel] = "m"
		}
		return p
	}
	pods := []corev1.Pod{pod("virt-launcher-vm-first", "n1", false), pod("virt-launcher-vm-second", "n2", true), pod("virt-launcher-vm-third", "n1", true)}
	for _, tc := range []struct {
		name string
		node string
		ms   *virtv1.VirtualMachineInstanceMigrationState
		want string
	}{
		{"no migration", "n1", nil, "virt-launcher-vm-first"},
		{"first migration running", "n1", &virtv1.VirtualMachineInstanceMigrationState{SourceNode: "n1", SourcePod: "virt-launcher-vm-first", TargetNode: "n2", TargetPod: "virt-launcher-vm-second"}, "virt-launcher-vm-first"},
		{"first migration handed over", "n2", &virtv1.VirtualMachineInstanceMigrationState{Completed: true, SourceNode: "n1", SourcePod: "virt-launcher-vm-first", TargetNode: "n2", TargetPod: "virt-launcher-vm-second"}, "virt-launcher-vm-second"},
		{"second migration running", "n2", &virtv1.VirtualMachineInstanceMigrationState{SourceNode: "n2", SourcePod: "virt-launcher-vm-second", TargetNode: "n1", TargetPod: "virt-launcher-vm-third"}, "virt-launcher-vm-second"},
		{"second migration failed", "n2", &virtv1.VirtualMachineInstanceMigrationState{Failed: true, Completed: true, SourceNode: "n2", SourcePod: "virt-launcher-vm-second", TargetNode: "n1", TargetPod: "virt-launcher-vm-third"}, "virt-launcher-vm-second"},
		{"second migration handed over", "n1", &virtv1.VirtualMachineInstanceMigrationState{Completed: true, SourceNode: "n2", SourcePod: "virt-launcher-vm-second", TargetNode: "n1", TargetPod: "virt-launcher-vm-third"}, "virt-launcher-vm-third"},
	} {
		v := vmi.DeepCopy()
		v.Status.NodeName, v.Status.MigrationState = tc.node, tc.ms
		got := ActivePod(v, pods, "virt-launcher-vm-first")
		if got == nil || got.Name != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, got, tc.want)
		}
	}
}
