package handler

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

func hotplugVMI(phases map[string]v1.VolumePhase, inSpec ...string) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{}
	for _, n := range inSpec {
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: n})
	}
	for n, p := range phases {
		vmi.Status.VolumeStatus = append(vmi.Status.VolumeStatus, v1.VolumeStatus{Name: n, Phase: p, HotplugVolume: &v1.HotplugVolumeStatus{AttachPodUID: types.UID("pod-" + n)}})
	}
	return vmi
}

func phaseOf(vmi *v1.VirtualMachineInstance, name string) (v1.VolumePhase, string) {
	for _, vs := range vmi.Status.VolumeStatus {
		if vs.Name == name {
			return vs.Phase, vs.Target
		}
	}
	return "missing", ""
}

func TestHotplugStatusFollowsWhatQEMUHas(t *testing.T) {
	vmi := hotplugVMI(map[string]v1.VolumePhase{
		"attached": v1.HotplugVolumeAttachedToNode, // QEMU has it now
		"waiting":  v1.HotplugVolumeAttachedToNode, // not handed over yet
		"removed":  v1.VolumeReady,                 // left the spec, detached
		"leaving":  v1.VolumeReady,                 // left the spec, QEMU still has it
	}, "attached", "waiting")
	ls := &launcherapi.StatusResponse{HotpluggedDisks: []*launcherapi.HotpluggedDisk{{Name: "attached", Target: "sda"}, {Name: "leaving", Target: "sdb"}}}
	applyHotplugStatus(vmi, ls)
	for name, want := range map[string]v1.VolumePhase{
		"attached": v1.VolumeReady, "waiting": v1.HotplugVolumeAttachedToNode,
		"removed": v1.HotplugVolumeUnMounted, "leaving": v1.VolumeReady,
	} {
		if got, _ := phaseOf(vmi, name); got != want {
			t.Errorf("volume %s: phase %s, want %s", name, got, want)
		}
	}
	if _, target := phaseOf(vmi, "attached"); target != "sda" {
		t.Errorf("target of the attached volume %q, want sda", target)
	}
}

func TestMemoryDumpStatusIsTheDumpOfThisAttachment(t *testing.T) {
	vmi := hotplugVMI(map[string]v1.VolumePhase{"dump": v1.HotplugVolumeAttachedToNode}, "dump")
	vmi.Status.VolumeStatus[0].MemoryDumpVolume = &v1.DomainMemoryDumpInfo{ClaimName: "dump"}
	// A dump through an earlier attachment pod of the same claim is not this one.
	old := &launcherapi.StatusResponse{MemoryDump: &launcherapi.MemoryDumpStatus{Id: "pod-old/dump/a.memory.dump", State: "completed"}}
	applyHotplugStatus(vmi, old)
	if got, _ := phaseOf(vmi, "dump"); got != v1.HotplugVolumeAttachedToNode {
		t.Fatalf("an earlier dump moved the phase to %s", got)
	}
	for state, want := range map[string]v1.VolumePhase{"active": v1.MemoryDumpVolumeInProgress, "completed": v1.MemoryDumpVolumeCompleted, "failed": v1.MemoryDumpVolumeFailed} {
		ls := &launcherapi.StatusResponse{MemoryDump: &launcherapi.MemoryDumpStatus{Id: "pod-dump/dump/b.memory.dump", State: state, StartUnixNano: 1, EndUnixNano: 2}}
		applyHotplugStatus(vmi, ls)
		info := vmi.Status.VolumeStatus[0].MemoryDumpVolume
		if got, _ := phaseOf(vmi, "dump"); got != want || info.TargetFileName != "b.memory.dump" {
			t.Errorf("dump %s: phase %s file %q, want %s b.memory.dump", state, got, info.TargetFileName, want)
		}
		if state != "active" && info.EndTimestamp == nil {
			t.Errorf("dump %s: no end time", state)
		}
	}
}
