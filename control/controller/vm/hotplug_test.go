package vm

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func addVolumeRequest(name, claim string, disk *virtv1.Disk) virtv1.VirtualMachineVolumeRequest {
	return virtv1.VirtualMachineVolumeRequest{AddVolumeOptions: &virtv1.AddVolumeOptions{
		Name: name, Disk: disk,
		VolumeSource: &virtv1.HotplugVolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}},
	}}
}

func removeVolumeRequest(name string) virtv1.VirtualMachineVolumeRequest {
	return virtv1.VirtualMachineVolumeRequest{RemoveVolumeOptions: &virtv1.RemoveVolumeOptions{Name: name}}
}

// setVolumeRequests plays virt-api's addvolume and removevolume.
func (f *fixture) setVolumeRequests(reqs ...virtv1.VirtualMachineVolumeRequest) {
	f.t.Helper()
	vm := f.vm()
	vm.Status.VolumeRequests = reqs
	if err := f.c.Status().Update(context.Background(), vm); err != nil {
		f.t.Fatal(err)
	}
}

// running starts the VM's VMI and reports it running.
func (f *fixture) running() {
	f.t.Helper()
	f.reconcile()
	f.setPhase(virtv1.Running, true)
	f.reconcile()
	f.wantStatus(virtv1.VirtualMachineStatusRunning)
}

func volumeNamed(spec virtv1.VirtualMachineInstanceSpec, name string) *virtv1.Volume {
	return findVolume(spec.Volumes, name)
}

func diskNamed(spec virtv1.VirtualMachineInstanceSpec, name string) *virtv1.Disk {
	for i := range spec.Domain.Devices.Disks {
		if spec.Domain.Devices.Disks[i].Name == name {
			return &spec.Domain.Devices.Disks[i]
		}
	}
	return nil
}

// wantHotplugged checks that spec has volume name as a hotpluggable claim with a scsi disk.
func wantHotplugged(t *testing.T, what string, spec virtv1.VirtualMachineInstanceSpec, name, claim string) {
	t.Helper()
	v, d := volumeNamed(spec, name), diskNamed(spec, name)
	if v == nil || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != claim || !v.PersistentVolumeClaim.Hotpluggable {
		t.Errorf("%s: volume %s is %+v", what, name, v)
	}
	if d == nil || d.Disk == nil || d.Disk.Bus != virtv1.DiskBusSCSI {
		t.Errorf("%s: disk %s is %+v", what, name, d)
	}
}

func TestVolumeRequestsOnRunningVM(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	f.running()
	uid := f.vmi().UID

	f.setVolumeRequests(addVolumeRequest("data", "data-pvc", &virtv1.Disk{}))
	f.reconcile()
	vm, vmi := f.vm(), f.vmi()
	wantHotplugged(t, "template", vm.Spec.Template.Spec, "data", "data-pvc")
	wantHotplugged(t, "VMI", vmi.Spec, "data", "data-pvc")
	if len(vm.Status.VolumeRequests) != 0 {
		t.Errorf("requests left: %+v", vm.Status.VolumeRequests)
	}
	if vmi.UID != uid || vmi.DeletionTimestamp != nil {
		t.Error("the VMI was replaced")
	}
	if hasVMCond(vm, virtv1.VirtualMachineRestartRequired) || vmi.Annotations[TemplateHashAnnotation] != TemplateHash(vm) {
		t.Errorf("hotplug made the VM need a restart: conditions %+v", vm.Status.Conditions)
	}

	f.setVolumeRequests(removeVolumeRequest("data"))
	f.reconcile()
	vm, vmi = f.vm(), f.vmi()
	for what, spec := range map[string]virtv1.VirtualMachineInstanceSpec{"template": vm.Spec.Template.Spec, "VMI": vmi.Spec} {
		if volumeNamed(spec, "data") != nil || diskNamed(spec, "data") != nil {
			t.Errorf("%s still has the removed volume: %+v", what, spec.Volumes)
		}
	}
	if len(vm.Status.VolumeRequests) != 0 || hasVMCond(vm, virtv1.VirtualMachineRestartRequired) {
		t.Errorf("requests %+v, conditions %+v", vm.Status.VolumeRequests, vm.Status.Conditions)
	}

	// A change the running VMI cannot take still needs a restart.
	vm.Spec.Template.Spec.Domain.Memory.Guest = ptr.To(resource.MustParse("128Mi"))
	if err := f.c.Update(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	f.setVolumeRequests(addVolumeRequest("data", "data-pvc", &virtv1.Disk{DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}}))
	f.reconcile()
	vm = f.vm()
	if !hasVMCond(vm, virtv1.VirtualMachineRestartRequired) {
		t.Error("a memory change next to a hotplug did not ask for a restart")
	}
	if d := diskNamed(f.vmi().Spec, "data"); d == nil || d.Disk.Bus != virtv1.DiskBusVirtio {
		t.Errorf("the requested bus was not kept: %+v", d)
	}
}

func TestVolumeRequestsOnStoppedVM(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyHalted))
	f.reconcile()
	f.setVolumeRequests(addVolumeRequest("data", "data-pvc", &virtv1.Disk{}))
	f.reconcile()
	vm := f.vm()
	wantHotplugged(t, "template", vm.Spec.Template.Spec, "data", "data-pvc")
	if len(vm.Status.VolumeRequests) != 0 || f.vmi() != nil {
		t.Fatalf("requests %+v", vm.Status.VolumeRequests)
	}

	// A VMI started later simply has the volume, and is current.
	f.setStrategy(virtv1.RunStrategyAlways)
	f.running()
	wantHotplugged(t, "new VMI", f.vmi().Spec, "data", "data-pvc")
	if hasVMCond(f.vm(), virtv1.VirtualMachineRestartRequired) {
		t.Error("restart required")
	}
}

func TestVolumeRequestsWaitForVMIChurn(t *testing.T) {
	f := newFixture(t, newVM(virtv1.RunStrategyAlways))
	// The round that creates the VMI leaves the request for the next, which sees that VMI.
	f.setVolumeRequests(addVolumeRequest("data", "data-pvc", &virtv1.Disk{}))
	f.reconcile()
	if vm := f.vm(); len(vm.Status.VolumeRequests) != 1 || volumeNamed(vm.Spec.Template.Spec, "data") != nil {
		t.Fatalf("handled while creating the VMI: %+v", vm.Status.VolumeRequests)
	}
	f.reconcile()
	wantHotplugged(t, "VMI", f.vmi().Spec, "data", "data-pvc")
	if r := f.vm().Status.VolumeRequests; len(r) != 0 {
		t.Errorf("requests left: %+v", r)
	}
}

func TestUnworkableVolumeRequestsAreDropped(t *testing.T) {
	vm := newVM(virtv1.RunStrategyHalted)
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
		ContainerDisk: &virtv1.ContainerDiskSource{Image: "disk:1"}}}}
	vm.Spec.Template.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "root"}}
	f := newFixture(t, vm)
	rec := events.NewFakeRecorder(10)
	f.r.Recorder = rec
	f.reconcile()

	dv := virtv1.VirtualMachineVolumeRequest{AddVolumeOptions: &virtv1.AddVolumeOptions{
		Name: "dv", Disk: &virtv1.Disk{}, VolumeSource: &virtv1.HotplugVolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "dv"}}}}
	noDisk := addVolumeRequest("nodisk", "c", nil)
	f.setVolumeRequests(dv, removeVolumeRequest("root"), noDisk, addVolumeRequest("data", "data-pvc", &virtv1.Disk{}))
	f.reconcile()
	got := f.vm()
	if len(got.Status.VolumeRequests) != 0 {
		t.Errorf("requests left: %+v", got.Status.VolumeRequests)
	}
	spec := got.Spec.Template.Spec
	if volumeNamed(spec, "root") == nil || volumeNamed(spec, "dv") != nil || volumeNamed(spec, "nodisk") != nil {
		t.Errorf("template volumes %+v", spec.Volumes)
	}
	wantHotplugged(t, "template", spec, "data", "data-pvc")
	var warnings []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, ReasonHotplugVolumeError) {
			warnings = append(warnings, e)
		}
	}
	if len(warnings) != 3 || !strings.Contains(strings.Join(warnings, "\n"), "qvirt has no CDI") || !strings.Contains(strings.Join(warnings, "\n"), "not hotpluggable") {
		t.Errorf("warnings %q", warnings)
	}
}

func TestTemplateHashIgnoresHotpluggedVolumes(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	before := TemplateHash(vm)
	applyVolumeRequest(&vm.Spec.Template.Spec, addVolumeRequest("data", "data-pvc", &virtv1.Disk{}))
	addMemoryDumpVolume(&vm.Spec.Template.Spec, "dump")
	if h := TemplateHash(vm); h != before {
		t.Errorf("hotplugged volumes changed the hash %s to %s", before, h)
	}
	vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.Hotpluggable = false
	if TemplateHash(vm) == before {
		t.Error("a claim given at start did not change the hash")
	}
}

func TestRemoveSparesPermanentVolumesOfTheVMI(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{{Name: "scratch", VolumeSource: virtv1.VolumeSource{
		EmptyDisk: &virtv1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}}}
	vm.Spec.Template.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "scratch"}}
	f := newFixture(t, vm)
	f.running()
	// The template dropped the disk (a restart away); removevolume of the name must not take
	// it from the running VMI, which could not give it up.
	vm = f.vm()
	vm.Spec.Template.Spec.Volumes, vm.Spec.Template.Spec.Domain.Devices.Disks = nil, nil
	if err := f.c.Update(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	f.setVolumeRequests(removeVolumeRequest("scratch"))
	f.reconcile()
	if volumeNamed(f.vmi().Spec, "scratch") == nil || diskNamed(f.vmi().Spec, "scratch") == nil {
		t.Error("a permanent volume was taken off the running VMI")
	}
	if r := f.vm().Status.VolumeRequests; len(r) != 0 {
		t.Errorf("requests left: %+v", r)
	}
}
