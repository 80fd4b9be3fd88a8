package vmi

import (
	"context"
	"testing"
	"time"

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

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := virtv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func newVMI(name string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Domain:                        virtv1.DomainSpec{Memory: &virtv1.Memory{Guest: ptr.To(resource.MustParse("64Mi"))}},
			TerminationGracePeriodSeconds: ptr.To[int64](7),
		},
	}
}

type fixture struct {
	t   *testing.T
	c   client.Client
	r   *Reconciler
	rec *events.FakeRecorder
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	c := fake.NewClientBuilder().
		WithScheme(newScheme(t)).
		WithObjects(objs...).
		WithStatusSubresource(&virtv1.VirtualMachineInstance{}).
		Build()
	rec := events.NewFakeRecorder(100)
	return &fixture{t: t, c: c, rec: rec, r: &Reconciler{Client: c, APIReader: c, Recorder: rec, Pods: launcherpod.DefaultOptions()}}
}

func (f *fixture) reconcile(name string) ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: name}})
	if err != nil {
		f.t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (f *fixture) vmi(name string) *virtv1.VirtualMachineInstance {
	f.t.Helper()
	v := &virtv1.VirtualMachineInstance{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

func (f *fixture) pods() []corev1.Pod {
	f.t.Helper()
	var l corev1.PodList
	if err := f.c.List(context.Background(), &l); err != nil {
		f.t.Fatal(err)
	}
	return l.Items
}

// setPod changes the launcher pod as the kubelet would.
func (f *fixture) setPod(mutate func(*corev1.Pod)) {
	f.t.Helper()
	pods := f.pods()
	if len(pods) != 1 {
		f.t.Fatalf("%d pods, want 1", len(pods))
	}
	mutate(&pods[0])
	status := pods[0].Status
	if err := f.c.Update(context.Background(), &pods[0]); err != nil {
		f.t.Fatal(err)
	}
	pods[0].Status = status
	if err := f.c.Status().Update(context.Background(), &pods[0]); err != nil {
		f.t.Fatal(err)
	}
}

func runReady(p *corev1.Pod) {
	p.Spec.NodeName = "node-1"
	p.Status.Phase = corev1.PodRunning
	p.Status.QOSClass = corev1.PodQOSBurstable
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
}

func TestCreatesPodAndFollowsIt(t *testing.T) {
	f := newFixture(t, newVMI("a"))
	f.reconcile("a")

	v := f.vmi("a")
	if v.Status.Phase != virtv1.Scheduling {
		t.Errorf("phase %q, want Scheduling", v.Status.Phase)
	}
	if !hasFinalizer(v, virtv1.VirtualMachineInstanceFinalizer) {
		t.Error("finalizer not added")
	}
	pods := f.pods()
	if len(pods) != 1 || pods[0].Name != launcherpod.PodName("a", v.UID) || !metav1.IsControlledBy(&pods[0], v) {
		t.Fatalf("pods %+v", pods)
	}

	// Reconciling again never creates a second pod.
	f.reconcile("a")
	if n := len(f.pods()); n != 1 {
		t.Fatalf("%d pods after a second round", n)
	}

	f.setPod(runReady)
	f.reconcile("a")
	v = f.vmi("a")
	if v.Status.Phase != virtv1.Scheduled || v.Status.NodeName != "node-1" || v.Labels[virtv1.NodeNameLabel] != "node-1" {
		t.Errorf("phase %q node %q label %q", v.Status.Phase, v.Status.NodeName, v.Labels[virtv1.NodeNameLabel])
	}
	if v.Status.QOSClass == nil || len(v.Status.ActivePods) != 1 {
		t.Errorf("qos %v activePods %v", v.Status.QOSClass, v.Status.ActivePods)
	}
	var phases []virtv1.VirtualMachineInstancePhase
	for _, ts := range v.Status.PhaseTransitionTimestamps {
		phases = append(phases, ts.Phase)
	}
	if len(phases) != 2 || phases[0] != virtv1.Scheduling || phases[1] != virtv1.Scheduled {
		t.Errorf("transitions %v", phases)
	}

	// The node agent moves it on; the pod then fails.
	v.Status.Phase = virtv1.Running
	if err := f.c.Status().Update(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	f.setPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	f.reconcile("a")
	v = f.vmi("a")
	if v.Status.Phase != virtv1.Failed || v.Status.Reason != ReasonPodFailed {
		t.Errorf("phase %q reason %q, want Failed %s", v.Status.Phase, v.Status.Reason, ReasonPodFailed)
	}

	// A final VMI loses its pod and then its finalizer, but stays.
	f.reconcile("a")
	if n := len(f.pods()); n != 0 {
		t.Errorf("%d pods left for a final VMI", n)
	}
	f.reconcile("a")
	if hasFinalizer(f.vmi("a"), virtv1.VirtualMachineInstanceFinalizer) {
		t.Error("finalizer kept on a final VMI without pods")
	}
}

func TestPodDisappears(t *testing.T) {
	f := newFixture(t, newVMI("a"))
	f.reconcile("a")
	f.setPod(runReady)
	f.reconcile("a")
	if err := f.c.Delete(context.Background(), &f.pods()[0]); err != nil {
		t.Fatal(err)
	}
	f.reconcile("a")
	v := f.vmi("a")
	if v.Status.Phase != virtv1.Failed || v.Status.Reason != ReasonPodMissing {
		t.Errorf("phase %q reason %q", v.Status.Phase, v.Status.Reason)
	}
	if n := len(f.pods()); n != 0 {
		t.Errorf("the pod of a failed VMI was recreated (%d pods)", n)
	}
}

func TestDeletion(t *testing.T) {
	f := newFixture(t, newVMI("a"))
	f.reconcile("a")
	f.setPod(func(p *corev1.Pod) {
		runReady(p)
		// The fake client removes a pod at once unless something holds it,
		// as kubelet does until the container is gone.
		p.Finalizers = []string{"test/kubelet"}
	})
	f.reconcile("a")
	if err := f.c.Delete(context.Background(), f.vmi("a")); err != nil {
		t.Fatal(err)
	}

	f.reconcile("a")
	pods := f.pods()
	if len(pods) != 1 || pods[0].DeletionTimestamp == nil {
		t.Fatalf("pod not being deleted: %+v", pods)
	}
	if !hasFinalizer(f.vmi("a"), virtv1.VirtualMachineInstanceFinalizer) {
		t.Fatal("finalizer removed while the pod still exists")
	}

	// The pod goes away: the VMI fails and is released.
	pods[0].Finalizers = nil
	if err := f.c.Update(context.Background(), &pods[0]); err != nil {
		t.Fatal(err)
	}
	f.reconcile("a")
	err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "a"}, &virtv1.VirtualMachineInstance{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("VMI still there (%v)", err)
	}
}

func TestDeletionBeforeLaunch(t *testing.T) {
	v := newVMI("a")
	v.Finalizers = []string{virtv1.VirtualMachineInstanceFinalizer, virtv1.VirtualMachineControllerFinalizer}
	v.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "a", UID: "vm-uid", Controller: ptr.To(true)}}
	f := newFixture(t, v)
	if err := f.c.Delete(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	// No VM exists, so the VM controller's finalizer goes too.
	f.reconcile("a")
	err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "a"}, &virtv1.VirtualMachineInstance{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("VMI still there (%v)", err)
	}
	if n := len(f.pods()); n != 0 {
		t.Errorf("%d pods created for a deleted VMI", n)
	}
}

func TestRenderFailure(t *testing.T) {
	v := newVMI("a")
	v.Spec.Domain.Memory = nil
	f := newFixture(t, v)
	f.reconcile("a")
	got := f.vmi("a")
	c := vmiutil.Condition(got, vmiutil.SynchronizedCondition)
	if c == nil || c.Reason != ReasonFailedCreate || got.Status.Phase != virtv1.Pending {
		t.Errorf("phase %q condition %+v", got.Status.Phase, c)
	}
	select {
	case e := <-f.rec.Events:
		t.Log(e)
	case <-time.After(time.Second):
		t.Error("no event recorded")
	}
}

func hasFinalizer(o metav1.Object, f string) bool {
	for _, x := range o.GetFinalizers() {
		if x == f {
			return true
		}
	}
	return false
}

// TestMigrationHandover: once a migration's target node took the VMI over, the target pod is
// the VMI's pod (a deleted source pod does not fail the VMI), the node label follows, and the
// source pod, ended, is deleted.
func TestMigrationHandover(t *testing.T) {
	f := newFixture(t, newVMI("m"))
	f.reconcile("m")
	f.setPod(runReady)
	f.reconcile("m")
	v := f.vmi("m")
	source := f.pods()[0]

	target := source.DeepCopy()
	target.ObjectMeta = metav1.ObjectMeta{Name: "virt-launcher-m-target", Namespace: "ns", UID: "target-uid",
		Labels:          map[string]string{virtv1.AppLabel: virtv1.VirtLauncherAppLabelValue, virtv1.CreatedByLabel: string(v.UID), virtv1.MigrationJobLabel: "mig-uid"},
		OwnerReferences: source.OwnerReferences}
	target.Spec.NodeName = "node-2"
	if err := f.c.Create(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	target.Status = source.Status
	if err := f.c.Status().Update(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	// The source launcher exited after sending the guest; the target's agent took it over.
	source.Status.Phase = corev1.PodSucceeded
	if err := f.c.Status().Update(context.Background(), &source); err != nil {
		t.Fatal(err)
	}
	v.Status.Phase = virtv1.Running
	v.Status.NodeName = "node-2"
	v.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "mig-uid", Completed: true,
		SourceNode: "node-1", SourcePod: source.Name, TargetNode: "node-2", TargetPod: target.Name}
	if err := f.c.Status().Update(context.Background(), v); err != nil {
		t.Fatal(err)
	}

	f.reconcile("m")
	v = f.vmi("m")
	if v.Status.Phase != virtv1.Running || v.Labels[virtv1.NodeNameLabel] != "node-2" {
		t.Errorf("phase %q, node label %q: want Running on node-2", v.Status.Phase, v.Labels[virtv1.NodeNameLabel])
	}
	if len(v.Status.ActivePods) != 1 || v.Status.ActivePods[target.UID] != "node-2" {
		t.Errorf("activePods %v, want only the target pod", v.Status.ActivePods)
	}
	for _, p := range f.pods() {
		if p.UID == source.UID {
			t.Errorf("the ended source pod %s was not deleted", p.Name)
		}
	}
}
