package migration

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// toScheduled brings migration m to Scheduled, its target pod running on node-2.
func (f *fixture) toScheduled(m string) corev1.Pod {
	f.t.Helper()
	f.reconcile(m)
	pod := f.targetPods(m)[0]
	pod.Spec.NodeName = "node-2"
	if err := f.c.Update(context.Background(), &pod); err != nil {
		f.t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := f.c.Status().Update(context.Background(), &pod); err != nil {
		f.t.Fatal(err)
	}
	f.reconcile(m)
	if p := f.get(m).Status.Phase; p != virtv1.MigrationScheduled {
		f.t.Fatalf("phase %s, want Scheduled", p)
	}
	return pod
}

func (f *fixture) vmi(name string) *virtv1.VirtualMachineInstance {
	f.t.Helper()
	v := &virtv1.VirtualMachineInstance{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

// report changes the VMI's migrationState as a node agent would.
func (f *fixture) report(name string, change func(*virtv1.VirtualMachineInstanceMigrationState)) {
	f.t.Helper()
	v := f.vmi(name)
	change(v.Status.MigrationState)
	if err := f.c.Status().Update(context.Background(), v); err != nil {
		f.t.Fatal(err)
	}
}

func TestMigrationFollowsTheNodeAgents(t *testing.T) {
	f := newFixture(t, runningVMI("vm", "node-1"), newMigration("m", "vm"))
	pod := f.toScheduled("m")
	f.reconcile("m")
	m := f.get("m")
	vs := f.vmi("vm").Status.MigrationState
	if m.Status.Phase != virtv1.MigrationPreparingTarget || vs == nil || vs.MigrationUID != m.UID || vs.TargetPod != pod.Name ||
		vs.TargetNode != "node-2" || vs.SourceNode != "node-1" || vs.Mode != virtv1.MigrationPreCopy {
		t.Fatalf("phase %s, the VMI's migrationState %+v", m.Status.Phase, vs)
	}

	now := metav1.Now()
	steps := []struct {
		report func(*virtv1.VirtualMachineInstanceMigrationState)
		want   virtv1.VirtualMachineInstanceMigrationPhase
	}{
		{func(s *virtv1.VirtualMachineInstanceMigrationState) {
			s.TargetNodeAddress = "10.0.0.2"
			s.TargetDirectMigrationNodePorts = map[string]int{"40001": 0}
		}, virtv1.MigrationTargetReady},
		{func(s *virtv1.VirtualMachineInstanceMigrationState) { s.StartTimestamp = &now }, virtv1.MigrationRunning},
		// The source is done, but the target's agent has not taken the VMI over yet.
		{func(s *virtv1.VirtualMachineInstanceMigrationState) { s.Completed, s.EndTimestamp = true, &now }, virtv1.MigrationRunning},
	}
	for _, s := range steps {
		f.report("vm", s.report)
		f.reconcile("m")
		if m = f.get("m"); m.Status.Phase != s.want {
			t.Fatalf("phase %s, want %s", m.Status.Phase, s.want)
		}
	}
	v := f.vmi("vm")
	v.Status.NodeName = "node-2"
	if err := f.c.Status().Update(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	f.reconcile("m")
	if m = f.get("m"); m.Status.Phase != virtv1.MigrationSucceeded {
		t.Fatalf("after the takeover: phase %s, want Succeeded", m.Status.Phase)
	}
	if st := m.Status.MigrationState; st.TargetNodeAddress != "10.0.0.2" || !st.Completed || st.StartTimestamp == nil {
		t.Errorf("the migration's state does not follow the VMI's: %+v", st)
	}
	var phases []virtv1.VirtualMachineInstanceMigrationPhase
	for _, ts := range m.Status.PhaseTransitionTimestamps {
		phases = append(phases, ts.Phase)
	}
	if fmt.Sprint(phases) != "[Scheduling Scheduled PreparingTarget TargetReady Running Succeeded]" {
		t.Errorf("transitions %v", phases)
	}
	// The target pod runs the VMI now: neither success nor deleting the migration removes it.
	if err := f.c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	f.reconcile("m")
	var pods corev1.PodList
	if err := f.c.List(context.Background(), &pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].DeletionTimestamp != nil {
		t.Errorf("the target pod of a succeeded migration was deleted: %d pods", len(pods.Items))
	}
}

func TestMigrationFailsWhenTheNodeAgentsSaySo(t *testing.T) {
	f := newFixture(t, runningVMI("vm", "node-1"), newMigration("m", "vm"))
	f.toScheduled("m")
	f.reconcile("m")
	f.report("vm", func(s *virtv1.VirtualMachineInstanceMigrationState) {
		s.Failed, s.FailureReason = true, "migration made no progress for 150s (progress timeout)"
	})
	f.reconcile("m")
	m := f.get("m")
	if m.Status.Phase != virtv1.MigrationFailed || m.Status.MigrationState.FailureReason != "migration made no progress for 150s (progress timeout)" {
		t.Fatalf("phase %s, state %+v", m.Status.Phase, m.Status.MigrationState)
	}
	f.reconcile("m")
	if n := len(f.targetPods("m")); n != 0 {
		t.Errorf("%d target pods left after the failure", n)
	}
}

func TestATargetPodThatStopsFailsTheMoveOnTheVMI(t *testing.T) {
	f := newFixture(t, runningVMI("vm", "node-1"), newMigration("m", "vm"))
	pod := f.toScheduled("m")
	f.reconcile("m")
	pod.Status.Phase = corev1.PodFailed
	if err := f.c.Status().Update(context.Background(), &pod); err != nil {
		t.Fatal(err)
	}
	f.reconcile("m")
	if p := f.get("m").Status.Phase; p != virtv1.MigrationFailed {
		t.Fatalf("phase %s", p)
	}
	// The source node's agent learns it from the VMI and keeps the VM.
	if vs := f.vmi("vm").Status.MigrationState; vs == nil || !vs.Failed || vs.EndTimestamp == nil || vs.FailureReason == "" {
		t.Errorf("the VMI's migrationState %+v", vs)
	}
}
