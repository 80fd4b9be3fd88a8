package vm

import (
	"context"

	"github.com/google/uuid"
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
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

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
		WithStatusSubresource(&virtv1.VirtualMachine{}, &virtv1.VirtualMachineInstance{}).
		WithInterceptorFuncs(interceptor.Funcs{Create: assignUID}).Build()
	return &fixture{t: t, c: c, r: &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), Jitter: func(int64) int64 { return 0 }}}
}

// assignUID gives created objects a UID, as the API server does.
func assignUID(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	if obj.GetUID() == "" {
		obj.SetUID(types.UID(uuid.NewString()))
	}
	return c.Create(ctx, obj, opts...)
}

func newVM(strategy virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "vm-uid", Generation: 1},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(strategy),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "x"}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{Memory: &virtv1.Memory{Guest: ptr.To(resource.MustParse("64Mi"))}},
				},
			},
		},
	}
}

func (f *fixture) reconcile() ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "vm"}})
	if err != nil {
		f.t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (f *fixture) vm() *virtv1.VirtualMachine {
	f.t.Helper()
	v := &virtv1.VirtualMachine{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "vm"}, v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

// vmi returns the VMI, or nil when there is none.
func (f *fixture) vmi() *virtv1.VirtualMachineInstance {
	f.t.Helper()
	v := &virtv1.VirtualMachineInstance{}
	err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "vm"}, v)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// setPhase plays the VMI controller and the node agent.
func (f *fixture) setPhase(p virtv1.VirtualMachineInstancePhase, ready bool) {
	f.t.Helper()
	v := f.vmi()
	if p == virtv1.Running || v.Status.Phase == virtv1.Running {
		v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps, virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: virtv1.Running})
	}
	v.Status.Phase = p
	v.Status.Conditions = nil
	if ready {
		v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}
	}
	if err := f.c.Status().Update(context.Background(), v); err != nil {
		f.t.Fatal(err)
	}
}

// finishDeletion plays the VMI controller letting a deleted VMI go. A final
// VMI is already gone: the VM controller released it.
func (f *fixture) finishDeletion() {
	f.t.Helper()
	v := f.vmi()
	if v == nil {
		return
	}
	if v.DeletionTimestamp == nil {
		f.t.Fatalf("VMI not being deleted: %+v", v)
	}
	v.Finalizers = nil
	if err := f.c.Update(context.Background(), v); err != nil {
		f.t.Fatal(err)
	}
	if f.vmi() != nil {
		f.t.Fatal("VMI survived losing its finalizers")
	}
}

func (f *fixture) setRequests(reqs ...virtv1.VirtualMachineStateChangeRequest) {
	f.t.Helper()
	vm := f.vm()
	vm.Status.StateChangeRequests = reqs
	if err := f.c.Status().Update(context.Background(), vm); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) setStrategy(s virtv1.VirtualMachineRunStrategy) {
	f.t.Helper()
	vm := f.vm()
	vm.Spec.RunStrategy = ptr.To(s)
	vm.Generation++
	if err := f.c.Update(context.Background(), vm); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) wantStatus(want virtv1.VirtualMachinePrintableStatus) {
	f.t.Helper()
	if got := f.vm().Status.PrintableStatus; got != want {
		f.t.Errorf("printableStatus %s, want %s", got, want)
	}
}

func TestAlways(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.reconcile()
	vm, vmi := f.vm(), f.vmi()
	if vmi == nil {
		t.Fatal("no VMI created")
	}
	if !metav1.IsControlledBy(vmi, vm) || !ptr.Deref(metav1.GetControllerOf(vmi).BlockOwnerDeletion, false) {
		t.Errorf("owner references %+v", vmi.OwnerReferences)
	}
	if vmi.Labels["app"] != "web" || vmi.Annotations["note"] != "x" || vmi.Annotations[GenerationAnnotation] != "1" {
		t.Errorf("labels %v annotations %v", vmi.Labels, vmi.Annotations)
	}
	if !controllerutil.ContainsFinalizer(vmi, virtv1.VirtualMachineControllerFinalizer) || !controllerutil.ContainsFinalizer(vm, virtv1.VirtualMachineControllerFinalizer) {
		t.Errorf("finalizers: VM %v, VMI %v", vm.Finalizers, vmi.Finalizers)
	}
	if vmi.Spec.Domain.Firmware == nil || vmi.Spec.Domain.Firmware.UUID != FirmwareUUID("vm") {
		t.Errorf("firmware %+v", vmi.Spec.Domain.Firmware)
	}
	f.wantStatus(virtv1.VirtualMachineStatusStarting)

	f.setPhase(virtv1.Running, true)
	f.reconcile()
	vm = f.vm()
	if !vm.Status.Created || !vm.Status.Ready || vm.Status.RunStrategy != virtv1.RunStrategyAlways || vm.Status.ObservedGeneration != 1 || vm.Status.DesiredGeneration != 1 {
		t.Errorf("status %+v", vm.Status)
	}
	f.wantStatus(virtv1.VirtualMachineStatusRunning)

	// The guest shuts down: the VMI is replaced.
	first := f.vmi().UID
	f.setPhase(virtv1.Succeeded, false)
	f.reconcile()
	// Deleted and released at once: with no VMI controller here, nothing else
	// holds it.
	if v := f.vmi(); v != nil {
		t.Fatalf("finished VMI still there, finalizers %v, deleted %v", v.Finalizers, v.DeletionTimestamp)
	}
	f.reconcile()
	if v := f.vmi(); v == nil || v.UID == first {
		t.Fatalf("VMI not recreated: %+v", v)
	}

	// Restart request: stop this VMI, then start a new one.
	f.setPhase(virtv1.Running, true)
	second := f.vmi().UID
	f.setRequests(virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: ptr.To(second)}, virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest})
	f.reconcile()
	f.wantStatus(virtv1.VirtualMachineStatusStopping)
	f.finishDeletion()
	f.reconcile()
	if v := f.vmi(); v == nil || v.UID == second {
		t.Fatal("restart did not create a new VMI")
	}
	f.reconcile()
	if r := f.vm().Status.StateChangeRequests; len(r) != 0 {
		t.Errorf("requests left: %+v", r)
	}
}

func TestAlwaysToHalted(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.reconcile()
	f.setPhase(virtv1.Running, true)
	f.reconcile()

	f.setStrategy(virtv1.RunStrategyHalted)
	f.reconcile()
	if v := f.vmi(); v == nil || v.DeletionTimestamp == nil {
		t.Fatal("VMI not deleted")
	}
	f.wantStatus(virtv1.VirtualMachineStatusStopping)
	f.finishDeletion()
	f.reconcile()
	f.wantStatus(virtv1.VirtualMachineStatusStopped)
	vm := f.vm()
	if vm.Status.Created || vm.Status.Ready || vm.Status.RunStrategy != virtv1.RunStrategyHalted {
		t.Errorf("status %+v", vm.Status)
	}
}

func TestManual(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyManual))
	f.reconcile()
	if f.vmi() != nil {
		t.Fatal("manual VM started by itself")
	}
	f.wantStatus(virtv1.VirtualMachineStatusStopped)

	f.setRequests(virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest, Data: map[string]string{virtv1.StartRequestDataPausedKey: "true"}})
	f.reconcile()
	vmi := f.vmi()
	if vmi == nil || vmi.Spec.StartStrategy == nil || *vmi.Spec.StartStrategy != virtv1.StartStrategyPaused {
		t.Fatalf("start request did not start a paused VMI: %+v", vmi)
	}
	f.reconcile()
	if r := f.vm().Status.StateChangeRequests; len(r) != 0 {
		t.Errorf("start request not removed: %+v", r)
	}

	f.setPhase(virtv1.Running, true)
	f.setRequests(virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: ptr.To(vmi.UID)})
	f.reconcile()
	f.finishDeletion()
	f.reconcile()
	if f.vmi() != nil {
		t.Error("VMI recreated after stop")
	}
	if r := f.vm().Status.StateChangeRequests; len(r) != 0 {
		t.Errorf("stop request not removed: %+v", r)
	}
	f.wantStatus(virtv1.VirtualMachineStatusStopped)
}

func TestRerunOnFailure(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyRerunOnFailure))
	f.reconcile()
	f.setPhase(virtv1.Running, true)
	f.reconcile()
	first := f.vmi().UID

	f.setPhase(virtv1.Failed, false)
	f.reconcile()
	if r := f.vm().Status.StateChangeRequests; len(r) != 1 || r[0].Action != virtv1.StartRequest {
		t.Fatalf("no start request queued: %+v", r)
	}
	f.finishDeletion()
	f.reconcile()
	if v := f.vmi(); v == nil || v.UID == first {
		t.Fatal("failed VMI not replaced")
	}
	if sf := f.vm().Status.StartFailure; sf != nil {
		t.Errorf("a VMI that ran counted as start failure: %+v", sf)
	}

	// Success is final.
	f.setPhase(virtv1.Running, true)
	f.setPhase(virtv1.Succeeded, false)
	f.reconcile()
	f.finishDeletion()
	f.reconcile()
	f.reconcile()
	if f.vmi() != nil {
		t.Error("succeeded VMI replaced")
	}
	f.wantStatus(virtv1.VirtualMachineStatusStopped)
}

func TestCrashLoopBackoff(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.r.Now = func() time.Time { return now }
	f.reconcile()
	f.setPhase(virtv1.Failed, false) // never ran
	f.reconcile()
	f.finishDeletion()
	res := f.reconcile()
	if f.vmi() != nil || res.RequeueAfter != 10*time.Second {
		t.Fatalf("restart not delayed: requeue %v, vmi %v", res.RequeueAfter, f.vmi() != nil)
	}
	f.wantStatus(virtv1.VirtualMachineStatusCrashLoopBackOff)
	now = now.Add(11 * time.Second)
	f.reconcile()
	if f.vmi() == nil {
		t.Fatal("not restarted after the backoff")
	}
}

func TestOnce(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyOnce))
	f.reconcile()
	f.setPhase(virtv1.Running, true)
	f.setPhase(virtv1.Succeeded, false)
	f.reconcile()
	if v := f.vmi(); v == nil || v.DeletionTimestamp != nil {
		t.Fatal("Once VMI deleted")
	}
	f.wantStatus(virtv1.VirtualMachineStatusStopped)
}

func TestRestartRequired(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.reconcile()
	f.setPhase(virtv1.Running, true)

	// Changing only the run strategy-independent metadata keeps the VMI current.
	vm := f.vm()
	vm.Spec.Template.ObjectMeta.Labels["tier"] = "2"
	vm.Generation = 2
	if err := f.c.Update(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	vm = f.vm()
	if hasVMCond(vm, virtv1.VirtualMachineRestartRequired) || vm.Status.ObservedGeneration != 2 || vm.Status.DesiredGeneration != 2 {
		t.Errorf("label change: conditions %+v, generations %d/%d", vm.Status.Conditions, vm.Status.ObservedGeneration, vm.Status.DesiredGeneration)
	}

	vm.Spec.Template.Spec.Domain.Memory.Guest = ptr.To(resource.MustParse("128Mi"))
	vm.Generation = 3
	if err := f.c.Update(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	vm = f.vm()
	if !hasVMCond(vm, virtv1.VirtualMachineRestartRequired) || vm.Status.ObservedGeneration != 2 || vm.Status.DesiredGeneration != 3 {
		t.Errorf("spec change: conditions %+v, generations %d/%d", vm.Status.Conditions, vm.Status.ObservedGeneration, vm.Status.DesiredGeneration)
	}
}

func TestConditionsFromVMI(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.reconcile()
	v := f.vmi()
	v.Status.Phase = virtv1.Running
	v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{
		{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue},
		{Type: virtv1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue, Reason: "PausedByUser"},
	}
	if err := f.c.Status().Update(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	vm := f.vm()
	if !hasVMCond(vm, virtv1.VirtualMachinePaused) || !hasVMCond(vm, virtv1.VirtualMachineReady) {
		t.Errorf("conditions %+v", vm.Status.Conditions)
	}
	f.wantStatus(virtv1.VirtualMachineStatusPaused)

	f.setPhase(virtv1.Running, true)
	f.reconcile()
	if hasVMCond(f.vm(), virtv1.VirtualMachinePaused) {
		t.Error("Paused kept after the VMI dropped it")
	}
}

func TestDeleteVM(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.reconcile()
	f.setPhase(virtv1.Running, true)
	if err := f.c.Delete(context.Background(), f.vm()); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	f.wantStatus(virtv1.VirtualMachineStatusTerminating)
	if v := f.vmi(); v == nil || v.DeletionTimestamp == nil {
		t.Fatal("VMI not deleted with its VM")
	}
	f.finishDeletion()
	f.reconcile()
	err := f.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "vm"}, &virtv1.VirtualMachine{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("VM still there: %v", err)
	}
}

func TestAdoptsOrphan(t *testing.T) {
	orphan := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "orphan"}}
	orphan.Status.Phase = virtv1.Running
	f := newFixture(t, newVM(virtv1.RunStrategyAlways), orphan)
	f.reconcile()
	v := f.vmi()
	if v.UID != "orphan" || !metav1.IsControlledBy(v, f.vm()) {
		t.Errorf("orphan not adopted: %+v", v.OwnerReferences)
	}
}

func TestBothRunningAndRunStrategy(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.Spec.Running = ptr.To(true)
	f := newFixture(t, vm)
	if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "vm"}}); err == nil {
		t.Fatal("no error for a VM with running and runStrategy")
	}
	if !hasVMCond(f.vm(), virtv1.VirtualMachineFailure) || f.vmi() != nil {
		t.Errorf("conditions %+v", f.vm().Status.Conditions)
	}
}

func hasVMCond(vm *virtv1.VirtualMachine, t virtv1.VirtualMachineConditionType) bool {
	for _, c := range vm.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
