package migration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

func mig(name, vmi, node string, phase virtv1.VirtualMachineInstanceMigrationPhase) virtv1.VirtualMachineInstanceMigration {
	m := virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi},
	}
	m.Status.Phase = phase
	if node != "" {
		m.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{SourceNode: node}
	}
	return m
}

func TestAdmit(t *testing.T) {
	l := DefaultLimits()
	running := func(n int, node string) []virtv1.VirtualMachineInstanceMigration {
		var out []virtv1.VirtualMachineInstanceMigration
		for i := range n {
			out = append(out, mig(fmt.Sprintf("%s-%d", node, i), fmt.Sprintf("vmi-%s-%d", node, i), node, virtv1.MigrationScheduling))
		}
		return out
	}
	me := mig("me", "mine", "", virtv1.MigrationPending)
	for _, tc := range []struct {
		name string
		all  []virtv1.VirtualMachineInstanceMigration
		want bool
	}{
		{"idle cluster", nil, true},
		{"one leaving my node", running(1, "n1"), true},
		{"two leaving my node", running(2, "n1"), false},
		{"two leaving another node", running(2, "n2"), true},
		{"four in the cluster", append(running(2, "n2"), running(2, "n3")...), true},
		{"five in the cluster", append(append(running(2, "n2"), running(2, "n3")...), running(1, "n4")...), false},
		{"pending and finished ones do not count", []virtv1.VirtualMachineInstanceMigration{
			mig("a", "x", "n1", virtv1.MigrationPending), mig("b", "y", "n1", virtv1.MigrationSucceeded),
			mig("c", "z", "n1", virtv1.MigrationFailed), mig("d", "w", "n1", "")}, true},
		{"same VMI in flight", []virtv1.VirtualMachineInstanceMigration{mig("other", "mine", "n2", virtv1.MigrationScheduled)}, false},
		{"itself", []virtv1.VirtualMachineInstanceMigration{mig("me", "mine", "n1", virtv1.MigrationScheduling)}, true},
	} {
		ok, why := Admit(&me, "n1", tc.all, l)
		if ok != tc.want {
			t.Errorf("%s: admitted %v (%s), want %v", tc.name, ok, why, tc.want)
		}
	}
}

type fixture struct {
	t *testing.T
	c client.Client
	r *Reconciler
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := virtv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithStatusSubresource(&virtv1.VirtualMachineInstanceMigration{}, &virtv1.VirtualMachineInstance{}).
		WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetUID() == "" {
				obj.SetUID(types.UID(uuid.NewString()))
			}
			return c.Create(ctx, obj, opts...)
		}}).Build()
	return &fixture{t: t, c: c, r: &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Pods: launcherpod.DefaultOptions(), Limits: DefaultLimits()}}
}

func runningVMI(name, node string) *virtv1.VirtualMachineInstance {
	v := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec:       virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Memory: &virtv1.Memory{Guest: ptr.To(resource.MustParse("64Mi"))}}},
	}
	v.Status.Phase = virtv1.Running
	v.Status.NodeName = node
	return v
}

func newMigration(name, vmi string) *virtv1.VirtualMachineInstanceMigration {
	return &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("mig-" + name)},
		Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi, AddedNodeSelector: map[string]string{"zone": "b"}},
	}
}

func (f *fixture) reconcile(name string) ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
	if err != nil {
		f.t.Fatalf("reconcile %s: %v", name, err)
	}
	return res
}

func (f *fixture) get(name string) *virtv1.VirtualMachineInstanceMigration {
	f.t.Helper()
	m := &virtv1.VirtualMachineInstanceMigration{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, m); err != nil {
		f.t.Fatal(err)
	}
	return m
}

func (f *fixture) targetPods(name string) []corev1.Pod {
	f.t.Helper()
	pods, err := f.r.targetPods(context.Background(), f.c, f.get(name))
	if err != nil {
		f.t.Fatal(err)
	}
	return pods
}

func TestMigrationToScheduled(t *testing.T) {
	f := newFixture(t, runningVMI("vm", "node-1"), newMigration("m", "vm"))
	f.reconcile("m")
	m := f.get("m")
	if m.Status.Phase != virtv1.MigrationScheduling || m.Status.MigrationState == nil || m.Status.MigrationState.SourceNode != "node-1" {
		t.Fatalf("status %+v", m.Status)
	}
	pods := f.targetPods("m")
	if len(pods) != 1 {
		t.Fatalf("%d target pods", len(pods))
	}
	pod := pods[0]
	if pod.Spec.NodeSelector["zone"] != "b" || pod.Labels[virtv1.MigrationJobLabel] != string(m.UID) || pod.Spec.Affinity == nil {
		t.Errorf("target pod %+v", pod.ObjectMeta)
	}
	if m.Status.MigrationState.TargetPod != pod.Name {
		t.Errorf("targetPod %q, pod %q", m.Status.MigrationState.TargetPod, pod.Name)
	}

	// Not yet running: stays.
	f.reconcile("m")
	if p := f.get("m").Status.Phase; p != virtv1.MigrationScheduling {
		t.Fatalf("phase %s", p)
	}

	pod.Spec.NodeName = "node-2"
	if err := f.c.Update(context.Background(), &pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := f.c.Status().Update(context.Background(), &pod); err != nil {
		t.Fatal(err)
	}
	f.reconcile("m")
	m = f.get("m")
	if m.Status.Phase != virtv1.MigrationScheduled || m.Status.MigrationState.TargetNode != "node-2" {
		t.Errorf("status %+v", m.Status)
	}
	var phases []virtv1.VirtualMachineInstanceMigrationPhase
	for _, ts := range m.Status.PhaseTransitionTimestamps {
		phases = append(phases, ts.Phase)
	}
	if fmt.Sprint(phases) != "[Scheduling Scheduled]" {
		t.Errorf("transitions %v", phases)
	}

	// Cancelling deletes the target pod, then releases the migration.
	if err := f.c.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	f.reconcile("m")
	var all corev1.PodList
	if err := f.c.List(context.Background(), &all); err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 0 {
		t.Errorf("%d pods left after cancel", len(all.Items))
	}
	f.reconcile("m")
	err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "m"}, &virtv1.VirtualMachineInstanceMigration{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("migration still there: %v", err)
	}
}

func TestMigrationValidation(t *testing.T) {
	stopped := runningVMI("stopped", "")
	stopped.Status.Phase = virtv1.Scheduling
	f := newFixture(t, stopped, newMigration("nothing", "missing"), newMigration("early", "stopped"))
	for name, reason := range map[string]string{"nothing": "does not exist", "early": "is not running"} {
		f.reconcile(name)
		m := f.get(name)
		if m.Status.Phase != virtv1.MigrationFailed || m.Status.MigrationState == nil || !m.Status.MigrationState.Failed {
			t.Errorf("%s: status %+v", name, m.Status)
			continue
		}
		if got := m.Status.MigrationState.FailureReason; !strings.Contains(got, reason) {
			t.Errorf("%s: failure reason %q", name, got)
		}
	}
}

func TestMigrationLimits(t *testing.T) {
	objs := []client.Object{}
	for i := range 3 {
		objs = append(objs, runningVMI(fmt.Sprintf("vm%d", i), "node-1"), newMigration(fmt.Sprintf("m%d", i), fmt.Sprintf("vm%d", i)))
	}
	f := newFixture(t, objs...)
	var waited ctrl.Result
	for i := range 3 {
		if res := f.reconcile(fmt.Sprintf("m%d", i)); res.RequeueAfter > 0 {
			waited = res
		}
	}
	phases := map[virtv1.VirtualMachineInstanceMigrationPhase]int{}
	for i := range 3 {
		phases[f.get(fmt.Sprintf("m%d", i)).Status.Phase]++
	}
	if phases[virtv1.MigrationScheduling] != 2 || phases[virtv1.MigrationPending] != 1 || waited.RequeueAfter == 0 {
		t.Errorf("phases %v, requeue %v", phases, waited.RequeueAfter)
	}

	// Cancelling one frees the slot.
	if err := f.c.Delete(context.Background(), f.get("m0")); err != nil {
		t.Fatal(err)
	}
	f.reconcile("m0")
	f.reconcile("m0")
	f.reconcile("m2")
	if p := f.get("m2").Status.Phase; p != virtv1.MigrationScheduling {
		t.Errorf("m2 still %s after a slot freed", p)
	}
}

func TestTargetPodFailsOrIsUnschedulable(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := newFixture(t, runningVMI("vm", "node-1"), newMigration("m", "vm"))
	f.r.Now = func() time.Time { return now }
	f.reconcile("m")
	pod := f.targetPods("m")[0]
	pod.Status.Phase = corev1.PodPending
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(now)}}
	if err := f.c.Status().Update(context.Background(), &pod); err != nil {
		t.Fatal(err)
	}
	if res := f.reconcile("m"); res.RequeueAfter != DefaultUnschedulableTimeout {
		t.Errorf("requeue %v", res.RequeueAfter)
	}
	now = now.Add(DefaultUnschedulableTimeout)
	f.reconcile("m")
	m := f.get("m")
	if m.Status.Phase != virtv1.MigrationFailed || len(f.targetPods("m")) != 0 {
		t.Errorf("phase %s, %d pods", m.Status.Phase, len(f.targetPods("m")))
	}
}
