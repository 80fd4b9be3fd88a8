package vm

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// A memory dump, as in KubeVirt: virt-api records the request (Associating); the VM controller
// adds the claim as a memoryDump volume to the template and the running VMI (InProgress);
// virt-handler attaches it and has QEMU write the dump, and reports it in the VMI's volume
// status; once it is written the controller takes the volume off the VMI (Unmounting) and the
// request is Completed when virt-handler no longer lists it. removememorydump (Dissociating)
// takes the claim off the template too and clears the request.

// stoppedDuringDumpMessage is the failure of a dump whose VMI went away before it was written.
const stoppedDuringDumpMessage = "the VMI stopped before the memory dump was written"

// memoryDumpFailedMessage stands in for a failure virt-handler gave no message for.
const memoryDumpFailedMessage = "Memory dump failed"

// memoryDumpPhase is the phase req is in; removememorydump overrides any other.
func memoryDumpPhase(req *virtv1.VirtualMachineMemoryDumpRequest) virtv1.MemoryDumpPhase {
	if req.Remove {
		return virtv1.MemoryDumpDissociating
	}
	return req.Phase
}

// applyMemoryDump changes the template (tmpl) and the live VMI's spec (nil when none) as req's
// phase asks.
func applyMemoryDump(req *virtv1.VirtualMachineMemoryDumpRequest, tmpl, live *virtv1.VirtualMachineInstanceSpec, running bool) {
	if req == nil {
		return
	}
	switch memoryDumpPhase(req) {
	case virtv1.MemoryDumpAssociating:
		// The dump is of the running guest: a stopped VM waits until it runs.
		if !running || memoryDumpClash(tmpl, req.ClaimName) || memoryDumpClash(live, req.ClaimName) || otherMemoryDump(tmpl, req.ClaimName) != "" {
			return
		}
		addMemoryDumpVolume(tmpl, req.ClaimName)
		addMemoryDumpVolume(live, req.ClaimName)
	case virtv1.MemoryDumpUnmounting, virtv1.MemoryDumpFailed:
		// The template keeps the claim until removememorydump, as in KubeVirt.
		removeMemoryDumpVolume(live, req.ClaimName)
	case virtv1.MemoryDumpDissociating:
		removeMemoryDumpVolume(live, req.ClaimName)
		removeMemoryDumpVolume(tmpl, req.ClaimName)
	}
}

// nextMemoryDumpRequest is the VM's memory dump request after what the template and the VMI
// show; nil once removememorydump is done.
func nextMemoryDumpRequest(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineMemoryDumpRequest {
	req := vm.Status.MemoryDumpRequest
	if req == nil {
		return nil
	}
	var tmpl *virtv1.VirtualMachineInstanceSpec
	if vm.Spec.Template != nil {
		tmpl = &vm.Spec.Template.Spec
	}
	next := req.DeepCopy()
	next.Phase = memoryDumpPhase(req)
	claim := req.ClaimName
	switch next.Phase {
	case virtv1.MemoryDumpAssociating:
		switch {
		case memoryDumpClash(tmpl, claim) || (isLive(vmi) && memoryDumpClash(&vmi.Spec, claim)):
			next.Phase = virtv1.MemoryDumpFailed
			next.Message = fmt.Sprintf("the VM already has a volume %s that is not a memory dump volume", claim)
		case otherMemoryDump(tmpl, claim) != "":
			// One memory dump volume at a time, as the webhook wants.
			next.Phase = virtv1.MemoryDumpFailed
			next.Message = fmt.Sprintf("the VM keeps the memory dump claim %s: remove it first (removememorydump)", otherMemoryDump(tmpl, claim))
		case isRunning(vmi) && hasMemoryDumpVolume(tmpl, claim) && hasMemoryDumpVolume(&vmi.Spec, claim):
			next.Phase = virtv1.MemoryDumpInProgress
		}
	case virtv1.MemoryDumpInProgress:
		if !isLive(vmi) {
			next.Phase, next.Message = virtv1.MemoryDumpFailed, stoppedDuringDumpMessage
			break
		}
		st := volumeStatus(vmi, claim)
		if st == nil {
			break
		}
		if info := st.MemoryDumpVolume; info != nil && info.StartTimestamp != nil {
			next.StartTimestamp = info.StartTimestamp.DeepCopy()
		}
		switch {
		case st.Phase == virtv1.MemoryDumpVolumeCompleted && st.MemoryDumpVolume != nil:
			next.Phase = virtv1.MemoryDumpUnmounting
			next.EndTimestamp = st.MemoryDumpVolume.EndTimestamp.DeepCopy()
			fileName := st.MemoryDumpVolume.TargetFileName
			next.FileName = &fileName
		case st.Phase == virtv1.MemoryDumpVolumeFailed:
			next.Phase, next.Message = virtv1.MemoryDumpFailed, st.Message
			if next.Message == "" {
				next.Message = memoryDumpFailedMessage
			}
			if st.MemoryDumpVolume != nil {
				next.EndTimestamp = st.MemoryDumpVolume.EndTimestamp.DeepCopy()
			}
		}
	case virtv1.MemoryDumpUnmounting:
		// A VMI that stopped holds no volume any more.
		if !isLive(vmi) || volumeStatus(vmi, claim) == nil {
			next.Phase = virtv1.MemoryDumpCompleted
		}
	case virtv1.MemoryDumpDissociating:
		if (isLive(vmi) && volumeStatus(vmi, claim) != nil) || hasMemoryDumpVolume(tmpl, claim) {
			break
		}
		return nil
	}
	return next
}

// withoutMemoryDump drops the memory dump request's volume from the spec of a VMI about to be
// created: the dump was of the guest that ran when it was asked for, and a VMI that starts
// later would otherwise dump itself at boot.
func withoutMemoryDump(vm *virtv1.VirtualMachine, spec *virtv1.VirtualMachineInstanceSpec) {
	if req := vm.Status.MemoryDumpRequest; req != nil {
		removeMemoryDumpVolume(spec, req.ClaimName)
	}
}

// memoryDumpPhaseOf is req's phase for the log, "" for none.
func memoryDumpPhaseOf(req *virtv1.VirtualMachineMemoryDumpRequest) virtv1.MemoryDumpPhase {
	if req == nil {
		return ""
	}
	return req.Phase
}

// claimOf is the claim of the first request that is set.
func claimOf(reqs ...*virtv1.VirtualMachineMemoryDumpRequest) string {
	for _, r := range reqs {
		if r != nil {
			return r.ClaimName
		}
	}
	return ""
}

func memoryDumpVolume(claim string) virtv1.Volume {
	return virtv1.Volume{Name: claim, VolumeSource: virtv1.VolumeSource{MemoryDump: &virtv1.MemoryDumpVolumeSource{
		PersistentVolumeClaimVolumeSource: virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
			Hotpluggable:                      true,
		},
	}}}
}

func hasMemoryDumpVolume(spec *virtv1.VirtualMachineInstanceSpec, claim string) bool {
	if spec == nil {
		return false
	}
	v := findVolume(spec.Volumes, claim)
	return v != nil && v.MemoryDump != nil
}

// memoryDumpClash reports a volume named like the claim that is something else: the memory
// dump volume is named after its claim, and must not take another's place.
func memoryDumpClash(spec *virtv1.VirtualMachineInstanceSpec, claim string) bool {
	if spec == nil {
		return false
	}
	v := findVolume(spec.Volumes, claim)
	return v != nil && v.MemoryDump == nil
}

// otherMemoryDump names the memoryDump volume of spec other than claim's, "" when none.
func otherMemoryDump(spec *virtv1.VirtualMachineInstanceSpec, claim string) string {
	if spec == nil {
		return ""
	}
	for _, v := range spec.Volumes {
		if v.MemoryDump != nil && v.Name != claim {
			return v.Name
		}
	}
	return ""
}

func addMemoryDumpVolume(spec *virtv1.VirtualMachineInstanceSpec, claim string) {
	if spec != nil && findVolume(spec.Volumes, claim) == nil {
		spec.Volumes = append(spec.Volumes, memoryDumpVolume(claim))
	}
}

func removeMemoryDumpVolume(spec *virtv1.VirtualMachineInstanceSpec, claim string) {
	if spec != nil {
		spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v virtv1.Volume) bool { return v.Name == claim && v.MemoryDump != nil })
	}
}

func volumeStatus(vmi *virtv1.VirtualMachineInstance, name string) *virtv1.VolumeStatus {
	if vmi == nil {
		return nil
	}
	for i := range vmi.Status.VolumeStatus {
		if vmi.Status.VolumeStatus[i].Name == name {
			return &vmi.Status.VolumeStatus[i]
		}
	}
	return nil
}
