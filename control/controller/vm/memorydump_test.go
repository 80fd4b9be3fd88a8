package vm

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// setMemoryDumpRequest plays virt-api's memorydump and removememorydump.
func (f *fixture) setMemoryDumpRequest(req *virtv1.VirtualMachineMemoryDumpRequest) {
	f.t.Helper()
	vm := f.vm()
	vm.Status.MemoryDumpRequest = req
	if err := f.c.Status().Update(context.Background(), vm); err != nil {
		f.t.Fatal(err)
	}
}

// setVolumeStatus plays virt-handler reporting the VMI's volumes.
func (f *fixture) setVolumeStatus(sts ...virtv1.VolumeStatus) {
	f.t.Helper()
	v := f.vmi()
	v.Status.VolumeStatus = sts
	if err := f.c.Status().Update(context.Background(), v); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) dump() *virtv1.VirtualMachineMemoryDumpRequest {
	f.t.Helper()
	return f.vm().Status.MemoryDumpRequest
}

func (f *fixture) wantDumpPhase(want virtv1.MemoryDumpPhase) *virtv1.VirtualMachineMemoryDumpRequest {
	f.t.Helper()
	d := f.dump()
	if d == nil || d.Phase != want {
		f.t.Fatalf("memory dump request %+v, want phase %s", d, want)
	}
	return d
}

func hasDumpVolume(spec virtv1.VirtualMachineInstanceSpec, claim string) bool {
	v := volumeNamed(spec, claim)
	return v != nil && v.MemoryDump != nil && v.MemoryDump.ClaimName == claim && v.MemoryDump.Hotpluggable
}

func TestMemoryDump(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.running()

	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump", Phase: virtv1.MemoryDumpAssociating})
	f.reconcile()
	f.wantDumpPhase(virtv1.MemoryDumpInProgress)
	vm, vmi := f.vm(), f.vmi()
	if !hasDumpVolume(vm.Spec.Template.Spec, "dump") || !hasDumpVolume(vmi.Spec, "dump") {
		t.Fatalf("memoryDump volume missing: template %+v, VMI %+v", vm.Spec.Template.Spec.Volumes, vmi.Spec.Volumes)
	}
	if diskNamed(vmi.Spec, "dump") != nil {
		t.Error("the memoryDump volume got a disk")
	}

	start := metav1.NewTime(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	end := metav1.NewTime(start.Add(time.Minute))
	f.setVolumeStatus(virtv1.VolumeStatus{Name: "dump", Phase: virtv1.MemoryDumpVolumeInProgress,
		MemoryDumpVolume: &virtv1.DomainMemoryDumpInfo{StartTimestamp: &start, ClaimName: "dump"}})
	f.reconcile()
	if d := f.wantDumpPhase(virtv1.MemoryDumpInProgress); d.StartTimestamp == nil || !d.StartTimestamp.Equal(&start) {
		t.Errorf("start not recorded: %+v", d)
	}

	f.setVolumeStatus(virtv1.VolumeStatus{Name: "dump", Phase: virtv1.MemoryDumpVolumeCompleted,
		MemoryDumpVolume: &virtv1.DomainMemoryDumpInfo{StartTimestamp: &start, EndTimestamp: &end, ClaimName: "dump", TargetFileName: "vm-ns-vm-20260301-100000.memory.dump"}})
	f.reconcile()
	d := f.wantDumpPhase(virtv1.MemoryDumpUnmounting)
	if d.EndTimestamp == nil || !d.EndTimestamp.Equal(&end) || d.FileName == nil || *d.FileName != "vm-ns-vm-20260301-100000.memory.dump" {
		t.Errorf("dump not recorded: %+v", d)
	}
	// The next round, which the status change brings, acts on Unmounting.
	f.reconcile()
	vm, vmi = f.vm(), f.vmi()
	if hasDumpVolume(vmi.Spec, "dump") || !hasDumpVolume(vm.Spec.Template.Spec, "dump") {
		t.Errorf("unmounting: VMI volumes %+v, template volumes %+v", vmi.Spec.Volumes, vm.Spec.Template.Spec.Volumes)
	}

	// Still attached until virt-handler no longer lists it.
	f.wantDumpPhase(virtv1.MemoryDumpUnmounting)
	f.setVolumeStatus()
	f.reconcile()
	f.wantDumpPhase(virtv1.MemoryDumpCompleted)
	vm = f.vm()
	if hasVMCond(vm, virtv1.VirtualMachineRestartRequired) || f.vmi().Annotations[TemplateHashAnnotation] != TemplateHash(vm) {
		t.Errorf("the dump made the VM need a restart: %+v", vm.Status.Conditions)
	}

	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump", Phase: virtv1.MemoryDumpDissociating, Remove: true})
	f.reconcile()
	if d := f.dump(); d != nil {
		t.Errorf("request kept after removememorydump: %+v", d)
	}
	if hasDumpVolume(f.vm().Spec.Template.Spec, "dump") {
		t.Error("template keeps the claim after removememorydump")
	}
}

func TestMemoryDumpFails(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.running()
	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump", Phase: virtv1.MemoryDumpAssociating})
	f.reconcile()
	f.setVolumeStatus(virtv1.VolumeStatus{Name: "dump", Phase: virtv1.MemoryDumpVolumeFailed, Message: "no space left on device",
		MemoryDumpVolume: &virtv1.DomainMemoryDumpInfo{ClaimName: "dump"}})
	f.reconcile()
	if d := f.wantDumpPhase(virtv1.MemoryDumpFailed); d.Message != "no space left on device" {
		t.Errorf("message %q", d.Message)
	}
	f.reconcile()
	if hasDumpVolume(f.vmi().Spec, "dump") {
		t.Error("a failed dump's claim stays attached")
	}
	// Failed is where it stays.
	f.setVolumeStatus()
	f.reconcile()
	f.wantDumpPhase(virtv1.MemoryDumpFailed)
}

func TestMemoryDumpOfStoppingVMI(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.running()
	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump", Phase: virtv1.MemoryDumpAssociating})
	f.reconcile()
	f.wantDumpPhase(virtv1.MemoryDumpInProgress)
	first := f.vmi().UID

	f.setPhase(virtv1.Failed, false)
	f.reconcile()
	if d := f.wantDumpPhase(virtv1.MemoryDumpFailed); d.Message != stoppedDuringDumpMessage {
		t.Errorf("message %q", d.Message)
	}
	f.finishDeletion()
	f.reconcile()
	v := f.vmi()
	if v == nil || v.UID == first {
		t.Fatal("VMI not replaced")
	}
	if hasDumpVolume(v.Spec, "dump") {
		t.Error("the new VMI starts with the memory dump claim")
	}
	f.setPhase(virtv1.Running, true)
	f.reconcile()
	if hasDumpVolume(f.vmi().Spec, "dump") {
		t.Error("the claim of a failed dump was attached to the new VMI")
	}
}

func TestMemoryDumpWaitsForRunningVM(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyHalted))
	f.reconcile()
	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump", Phase: virtv1.MemoryDumpAssociating})
	f.reconcile()
	f.wantDumpPhase(virtv1.MemoryDumpAssociating)
	if hasDumpVolume(f.vm().Spec.Template.Spec, "dump") {
		t.Error("a stopped VM got the claim")
	}
}

func TestMemoryDumpNeverReplacesAVolume(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.running()
	f.setVolumeRequests(addVolumeRequest("dump", "dump", &virtv1.Disk{}))
	f.reconcile()
	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump", Phase: virtv1.MemoryDumpAssociating})
	f.reconcile()
	f.wantDumpPhase(virtv1.MemoryDumpFailed)
	f.reconcile()
	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "dump", Phase: virtv1.MemoryDumpDissociating, Remove: true})
	f.reconcile()
	wantHotplugged(t, "VMI", f.vmi().Spec, "dump", "dump")
	wantHotplugged(t, "template", f.vm().Spec.Template.Spec, "dump", "dump")
}

func TestMemoryDumpToASecondClaimWaitsForRemoval(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.running()
	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "first", Phase: virtv1.MemoryDumpAssociating})
	f.reconcile()
	f.wantDumpPhase(virtv1.MemoryDumpInProgress)
	f.setMemoryDumpRequest(&virtv1.VirtualMachineMemoryDumpRequest{ClaimName: "second", Phase: virtv1.MemoryDumpAssociating})
	f.reconcile()
	if d := f.wantDumpPhase(virtv1.MemoryDumpFailed); !strings.Contains(d.Message, "first") {
		t.Errorf("message %q", d.Message)
	}
	if hasDumpVolume(f.vm().Spec.Template.Spec, "second") {
		t.Error("a second memory dump volume was added")
	}
}
