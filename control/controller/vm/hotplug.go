package vm

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

// ReasonHotplugVolumeError is KubeVirt's Failure reason when the hotplugged volumes could not
// be written to the VM or its VMI.
const ReasonHotplugVolumeError = "HotPlugVolumeError"

// hotplugDiskBus is the bus of a hotplugged disk that names none: virtctl addvolume's default,
// and one QEMU can hotplug on (sata cannot).
const hotplugDiskBus = virtv1.DiskBusSCSI

// syncHotplug carries out the VM's volume requests and its memory dump request on the
// template and, when one runs, on the VMI's spec. virt-handler attaches and detaches what
// changes in the VMI's spec; the template keeps the volumes for the VMIs started later.
func (r *Reconciler) syncHotplug(ctx context.Context, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) error {
	if vm.Spec.Template == nil {
		return nil
	}
	tmpl := vm.Spec.Template.Spec.DeepCopy()
	var live *virtv1.VirtualMachineInstanceSpec
	if isLive(vmi) {
		live = vmi.Spec.DeepCopy()
	}
	for _, req := range vm.Status.VolumeRequests {
		if problem := volumeRequestProblem(tmpl, req); problem != "" {
			// Dropped from the status in this round (pendingVolumeRequests): kept, it would
			// hold up every request behind it.
			r.Recorder.Eventf(vm, nil, corev1.EventTypeWarning, ReasonHotplugVolumeError, "HotplugVolume", "Dropped a volume request: %s", problem)
			continue
		}
		applyVolumeRequest(tmpl, req)
		if live != nil {
			applyVolumeRequest(live, req)
		}
	}
	applyMemoryDump(vm.Status.MemoryDumpRequest, tmpl, live, isRunning(vmi))

	logger := log.FromContext(ctx)
	if live != nil && !equality.Semantic.DeepEqual(*live, vmi.Spec) {
		added, removed := volumeNameChanges(vmi.Spec.Volumes, live.Volumes)
		orig := vmi.DeepCopy()
		vmi.Spec = *live
		if err := r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			// The round goes on with what the API server holds.
			vmi.Spec = orig.Spec
			return fmt.Errorf("updating the volumes of VMI %s: %w", vmi.Name, err)
		}
		logger.Info("Changed the hotplugged volumes of the running VMI", "vmiUID", vmi.UID, "added", added, "removed", removed)
	}
	if !equality.Semantic.DeepEqual(*tmpl, vm.Spec.Template.Spec) {
		added, removed := volumeNameChanges(vm.Spec.Template.Spec.Volumes, tmpl.Volumes)
		orig := vm.DeepCopy()
		vm.Spec.Template.Spec = *tmpl
		if err := r.Client.Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			// Else the status would count the requests as done.
			vm.Spec = orig.Spec
			return fmt.Errorf("updating the volumes of the VM template: %w", err)
		}
		logger.Info("Changed the hotplugged volumes of the VM template", "added", added, "removed", removed)
	}
	return nil
}

// isLive reports a VMI whose spec hotplug changes still reach: one neither going nor gone.
func isLive(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi != nil && vmi.DeletionTimestamp == nil && !vmiutil.IsFinal(vmi)
}

func isRunning(vmi *virtv1.VirtualMachineInstance) bool {
	return isLive(vmi) && vmiutil.IsRunning(vmi)
}

// volumeRequestProblem says why req cannot be carried out on spec, "" when it can. virt-api
// checks requests before it queues them; these are what would otherwise wedge the queue.
func volumeRequestProblem(spec *virtv1.VirtualMachineInstanceSpec, req virtv1.VirtualMachineVolumeRequest) string {
	add, remove := req.AddVolumeOptions, req.RemoveVolumeOptions
	switch {
	case add != nil && remove != nil:
		return "it both adds and removes a volume"
	case add != nil:
		switch {
		case add.Name == "":
			return "it adds a volume without a name"
		case add.Disk == nil:
			return fmt.Sprintf("it adds volume %s without a disk", add.Name)
		case add.VolumeSource != nil && add.VolumeSource.PersistentVolumeClaim == nil && add.VolumeSource.DataVolume != nil:
			return fmt.Sprintf("it adds volume %s from a dataVolume: qvirt has no CDI, only persistentVolumeClaim volumes are hotplugged", add.Name)
		case add.VolumeSource == nil || add.VolumeSource.PersistentVolumeClaim == nil || add.VolumeSource.PersistentVolumeClaim.ClaimName == "":
			return fmt.Sprintf("it adds volume %s without a persistentVolumeClaim", add.Name)
		}
	case remove != nil:
		if remove.Name == "" {
			return "it removes a volume without a name"
		}
		if v := findVolume(spec.Volumes, remove.Name); v != nil && !v.IsHotplugged() {
			return fmt.Sprintf("it removes volume %s, which is not hotpluggable", remove.Name)
		}
	default:
		return "it neither adds nor removes a volume"
	}
	return ""
}

// applyVolumeRequest changes spec as req asks: an added volume becomes a hotpluggable claim
// with its disk, unless a volume of that name is there already; a removed one goes with its
// disk, unless it is not hotplugged (the VMI may differ from the template there).
func applyVolumeRequest(spec *virtv1.VirtualMachineInstanceSpec, req virtv1.VirtualMachineVolumeRequest) {
	if add := req.AddVolumeOptions; add != nil {
		if findVolume(spec.Volumes, add.Name) != nil {
			return
		}
		pvc := add.VolumeSource.PersistentVolumeClaim.DeepCopy()
		pvc.Hotpluggable = true
		spec.Volumes = append(spec.Volumes, virtv1.Volume{Name: add.Name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: pvc}})
		if !slices.ContainsFunc(spec.Domain.Devices.Disks, func(d virtv1.Disk) bool { return d.Name == add.Name }) {
			spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, hotplugDisk(add))
		}
		return
	}
	if rm := req.RemoveVolumeOptions; rm != nil {
		if v := findVolume(spec.Volumes, rm.Name); v != nil && !v.IsHotplugged() {
			return
		}
		spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v virtv1.Volume) bool { return v.Name == rm.Name })
		spec.Domain.Devices.Disks = slices.DeleteFunc(spec.Domain.Devices.Disks, func(d virtv1.Disk) bool { return d.Name == rm.Name })
	}
}

// hotplugDisk is the disk of an added volume. A VMI's spec gets no defaults after its
// creation, so the target and bus are filled in here.
func hotplugDisk(add *virtv1.AddVolumeOptions) virtv1.Disk {
	d := *add.Disk.DeepCopy()
	d.Name = add.Name
	if d.Disk == nil && d.LUN == nil && d.CDRom == nil {
		d.Disk = &virtv1.DiskTarget{}
	}
	if d.Disk != nil && d.Disk.Bus == "" {
		d.Disk.Bus = hotplugDiskBus
	}
	if d.LUN != nil && d.LUN.Bus == "" {
		d.LUN.Bus = hotplugDiskBus
	}
	return d
}

// pendingVolumeRequests are the VM's volume requests its template does not reflect yet: an
// add is done once the volume and its disk are there, a remove once both are gone. Requests
// that cannot be carried out are dropped (syncHotplug reported them).
func pendingVolumeRequests(vm *virtv1.VirtualMachine) []virtv1.VirtualMachineVolumeRequest {
	if len(vm.Status.VolumeRequests) == 0 {
		return nil
	}
	var spec virtv1.VirtualMachineInstanceSpec
	if vm.Spec.Template != nil {
		spec = vm.Spec.Template.Spec
	}
	var out []virtv1.VirtualMachineVolumeRequest
	for _, req := range vm.Status.VolumeRequests {
		if volumeRequestProblem(&spec, req) != "" {
			continue
		}
		name := ""
		if req.AddVolumeOptions != nil {
			name = req.AddVolumeOptions.Name
		} else {
			name = req.RemoveVolumeOptions.Name
		}
		hasVolume := findVolume(spec.Volumes, name) != nil
		hasDisk := slices.ContainsFunc(spec.Domain.Devices.Disks, func(d virtv1.Disk) bool { return d.Name == name })
		done := (req.AddVolumeOptions != nil && hasVolume && hasDisk) || (req.RemoveVolumeOptions != nil && !hasVolume && !hasDisk)
		if !done {
			out = append(out, *req.DeepCopy())
		}
	}
	return out
}

func findVolume(volumes []virtv1.Volume, name string) *virtv1.Volume {
	for i := range volumes {
		if volumes[i].Name == name {
			return &volumes[i]
		}
	}
	return nil
}

// volumeNameChanges names the volumes of after that before lacks, and the other way round.
func volumeNameChanges(before, after []virtv1.Volume) (added, removed []string) {
	for _, v := range after {
		if findVolume(before, v.Name) == nil {
			added = append(added, v.Name)
		}
	}
	for _, v := range before {
		if findVolume(after, v.Name) == nil {
			removed = append(removed, v.Name)
		}
	}
	return added, removed
}

// withoutHotplugged is spec without its hotplugged volumes and their disks. They come and go
// on the running VMI, so they never make it need a restart.
func withoutHotplugged(spec virtv1.VirtualMachineInstanceSpec) virtv1.VirtualMachineInstanceSpec {
	hot := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.IsHotplugged() {
			hot[v.Name] = true
		}
	}
	if len(hot) == 0 {
		return spec
	}
	out := *spec.DeepCopy()
	out.Volumes = slices.DeleteFunc(out.Volumes, func(v virtv1.Volume) bool { return hot[v.Name] })
	out.Domain.Devices.Disks = slices.DeleteFunc(out.Domain.Devices.Disks, func(d virtv1.Disk) bool { return hot[d.Name] })
	return out
}
