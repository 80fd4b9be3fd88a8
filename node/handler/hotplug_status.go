package handler

import (
	"fmt"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// Reasons of hotplugged volumes' statuses that the node agent sets, as KubeVirt's.
const (
	reasonVolumeReady     = "VolumeReady"
	reasonVolumeUnMounted = "VolumeUnMountedFromPod"
	reasonVolumeMounted   = "VolumeMountedToPod"
)

// applyHotplugStatus reports what QEMU has of the hotplugged volumes: Ready with the guest
// device once attached, UnMountedFromPod once a volume that left the spec is detached, and the
// progress of a memory dump. Phases before that are virt-controller's.
func applyHotplugStatus(vmi *v1.VirtualMachineInstance, ls *launcherapi.StatusResponse) {
	targets := map[string]string{}
	for _, d := range ls.GetHotpluggedDisks() {
		targets[d.Name] = d.Target
	}
	for i := range vmi.Status.VolumeStatus {
		vs := &vmi.Status.VolumeStatus[i]
		if vs.HotplugVolume == nil {
			continue
		}
		if vs.MemoryDumpVolume != nil {
			applyMemoryDump(vs, ls)
			continue
		}
		if t, ok := targets[vs.Name]; ok {
			vs.Target, vs.Phase, vs.Reason = t, v1.VolumeReady, reasonVolumeReady
			vs.Message = fmt.Sprintf("Successfully attach hotplugged volume %s to VM", vs.Name)
			continue
		}
		vs.Target = ""
		if !inSpec(vmi, vs.Name) && (vs.Phase == v1.VolumeReady || vs.Phase == v1.HotplugVolumeMounted) {
			vs.Phase, vs.Reason = v1.HotplugVolumeUnMounted, reasonVolumeUnMounted
			vs.Message = fmt.Sprintf("Volume %s has been unmounted from virt-launcher pod", vs.Name)
		}
	}
}

// applyMemoryDump follows the launcher's dump into a memoryDump volume.
func applyMemoryDump(vs *v1.VolumeStatus, ls *launcherapi.StatusResponse) {
	md, file := dumpOf(ls, vs)
	if md == nil {
		return
	}
	info := vs.MemoryDumpVolume
	info.TargetFileName = file
	if md.StartUnixNano > 0 {
		info.StartTimestamp = unixTime(md.StartUnixNano)
	}
	switch md.State {
	case "completed":
		vs.Phase, vs.Reason = v1.MemoryDumpVolumeCompleted, reasonVolumeReady
		vs.Message = fmt.Sprintf("Memory dump to Volume %s has completed successfully", vs.Name)
		info.EndTimestamp = unixTime(md.EndUnixNano)
	case "failed":
		vs.Phase, vs.Reason = v1.MemoryDumpVolumeFailed, reasonVolumeMounted
		vs.Message = fmt.Sprintf("Memory dump to pvc %s failed: %s", vs.Name, md.Message)
		info.EndTimestamp = unixTime(md.EndUnixNano)
	default:
		vs.Phase, vs.Reason = v1.MemoryDumpVolumeInProgress, reasonVolumeMounted
		vs.Message = fmt.Sprintf("Memory dump Volume %s is attached, getting memory dump", vs.Name)
	}
}
