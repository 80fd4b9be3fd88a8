package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// Volume hotplug, as KubeVirt with its HotplugVolumes gate: addvolume and removevolume on a
// VMI change that VMI's spec alone (the node agent attaches or detaches the claim), on a VM they
// queue a request in status.volumeRequests that the VM controller applies to the template and to
// the running VMI.

func (s *Server) vmiAddVolume(w http.ResponseWriter, r *http.Request) {
	o, err := decodeAddVolume(r, "Hotplug configuration")
	if err != nil {
		writeError(w, err)
		return
	}
	s.patchVMIVolumes(w, r, v1.VirtualMachineVolumeRequest{AddVolumeOptions: o}, dryRun(o.DryRun))
}

func (s *Server) vmiRemoveVolume(w http.ResponseWriter, r *http.Request) {
	o, err := decodeRemoveVolume(r)
	if err != nil {
		writeError(w, err)
		return
	}
	s.patchVMIVolumes(w, r, v1.VirtualMachineVolumeRequest{RemoveVolumeOptions: o}, dryRun(o.DryRun))
}

func (s *Server) vmAddVolume(w http.ResponseWriter, r *http.Request) {
	o, err := decodeAddVolume(r, "AddVolume request")
	if err != nil {
		writeError(w, err)
		return
	}
	s.queueVMVolumeRequest(w, r, v1.VirtualMachineVolumeRequest{AddVolumeOptions: o}, dryRun(o.DryRun))
}

func (s *Server) vmRemoveVolume(w http.ResponseWriter, r *http.Request) {
	o, err := decodeRemoveVolume(r)
	if err != nil {
		writeError(w, err)
		return
	}
	s.queueVMVolumeRequest(w, r, v1.VirtualMachineVolumeRequest{RemoveVolumeOptions: o}, dryRun(o.DryRun))
}

// patchVMIVolumes adds the volume and its disk to a running VMI, or takes them off.
func (s *Server) patchVMIVolumes(w http.ResponseWriter, r *http.Request, req v1.VirtualMachineVolumeRequest, dry bool) {
	ctx := r.Context()
	name := r.PathValue("name")
	vmi := &v1.VirtualMachineInstance{}
	obj, err := s.getStored(ctx, r.PathValue("namespace"), name, "virtualmachineinstance", vmi)
	if err != nil {
		writeError(w, err)
		return
	}
	refuse := func(err error) {
		writeError(w, apierrors.NewConflict(kubevirtResource("virtualmachineinstance"), name, err))
	}
	if vmi.Status.Phase != v1.Running {
		refuse(errors.New("VMI is not running"))
		return
	}
	spec := &vmi.Spec
	vi, di, err := findVolumeChange(spec.Volumes, spec.Domain.Devices.Disks, req)
	if err != nil {
		refuse(err)
		return
	}
	const volumes, disks = "/spec/volumes", "/spec/domain/devices/disks"
	ops := []any{testOp(volumes, obj.at("spec", "volumes")), testOp(disks, obj.at("spec", "domain", "devices", "disks"))}
	if o := req.AddVolumeOptions; o != nil {
		vol := v1.Volume{Name: o.Name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: o.VolumeSource.PersistentVolumeClaim}}
		ops = append(ops, appendOp(volumes, len(spec.Volumes), vol), appendOp(disks, len(spec.Domain.Devices.Disks), o.Disk))
	} else {
		ops = append(ops, removeOp{"remove", volumes + "/" + strconv.Itoa(vi)})
		if di >= 0 {
			ops = append(ops, removeOp{"remove", disks + "/" + strconv.Itoa(di)})
		}
	}
	if err := s.guardedPatch(ctx, vmi, false, ops, dry); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// appendOp appends v to the list at path, or makes the list when there is none.
func appendOp(path string, n int, v any) patchOp {
	if n == 0 {
		return addOp(path, []any{v})
	}
	return addOp(path+"/-", v)
}

// queueVMVolumeRequest checks a request against the VM's template and its pending requests
// and appends it to status.volumeRequests.
func (s *Server) queueVMVolumeRequest(w http.ResponseWriter, r *http.Request, req v1.VirtualMachineVolumeRequest, dry bool) {
	ctx := r.Context()
	name := r.PathValue("name")
	vm := &v1.VirtualMachine{}
	obj, err := s.getStored(ctx, r.PathValue("namespace"), name, "virtualmachine", vm)
	if err != nil {
		writeError(w, err)
		return
	}
	var tmpl v1.VirtualMachineInstanceSpec
	if vm.Spec.Template != nil {
		tmpl = vm.Spec.Template.Spec
	}
	reqs, err := queueVolumeRequest(tmpl, vm.Status.VolumeRequests, req)
	if err != nil {
		writeError(w, apierrors.NewConflict(kubevirtResource("virtualmachine"), name, err))
		return
	}
	if err := s.guardedPatch(ctx, vm, true, setStatusField(obj, "volumeRequests", reqs), dry); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// queueVolumeRequest returns the VM's requests with req added. A removal drops pending
// additions of the same volume, as KubeVirt: the volume then never arrives.
func queueVolumeRequest(tmpl v1.VirtualMachineInstanceSpec, pending []v1.VirtualMachineVolumeRequest, req v1.VirtualMachineVolumeRequest) ([]v1.VirtualMachineVolumeRequest, error) {
	vi, _, err := findVolumeChange(tmpl.Volumes, tmpl.Domain.Devices.Disks, req)
	if err != nil {
		return nil, err
	}
	out := []v1.VirtualMachineVolumeRequest{}
	if o := req.AddVolumeOptions; o != nil {
		for _, p := range pending {
			if p.AddVolumeOptions != nil && p.AddVolumeOptions.Name == o.Name {
				return nil, fmt.Errorf("add volume request for volume [%s] already exists", o.Name)
			}
			if p.RemoveVolumeOptions != nil && p.RemoveVolumeOptions.Name == o.Name {
				return nil, fmt.Errorf("unable to add volume since a remove volume request for volume [%s] already exists and is still being processed", o.Name)
			}
		}
		return append(append(out, pending...), req), nil
	}
	// The request names the volume as found, also when it was given by its claim's name.
	o := *req.RemoveVolumeOptions
	o.Name = tmpl.Volumes[vi].Name
	for _, p := range pending {
		switch {
		case p.AddVolumeOptions != nil && p.AddVolumeOptions.Name == o.Name:
		case p.RemoveVolumeOptions != nil && p.RemoveVolumeOptions.Name == o.Name:
			return nil, fmt.Errorf("a remove volume request for volume [%s] already exists and is still being processed", o.Name)
		default:
			out = append(out, p)
		}
	}
	return append(out, v1.VirtualMachineVolumeRequest{RemoveVolumeOptions: &o}), nil
}

// findVolumeChange checks a request against a spec's volumes and disks, with KubeVirt's
// messages. For a removal it returns the index of the volume, found by its name or its claim's,
// and of the disk of that name (-1 if none).
func findVolumeChange(volumes []v1.Volume, disks []v1.Disk, req v1.VirtualMachineVolumeRequest) (vi, di int, err error) {
	if o := req.AddVolumeOptions; o != nil {
		claim := o.VolumeSource.PersistentVolumeClaim.ClaimName
		for _, vol := range volumes {
			if vol.Name == o.Name {
				return -1, -1, fmt.Errorf("Unable to add volume [%s] because volume with that name already exists", o.Name)
			}
			if volumeClaim(vol) == claim {
				return -1, -1, fmt.Errorf("Unable to add volume source [%s] because it already exists", claim)
			}
		}
		for _, d := range disks {
			if d.Name == o.Name {
				return -1, -1, fmt.Errorf("Unable to add volume [%s] because disk with that name already exists", o.Name)
			}
		}
		return -1, -1, nil
	}
	name := req.RemoveVolumeOptions.Name
	vi = -1
	for i, vol := range volumes {
		if vol.Name == name {
			vi = i
			break
		}
		if vi < 0 && volumeClaim(vol) == name {
			vi = i
		}
	}
	if vi < 0 {
		return -1, -1, fmt.Errorf("Unable to remove volume [%s] because it does not exist", name)
	}
	vol := volumes[vi]
	if !hotpluggable(vol) {
		return -1, -1, fmt.Errorf("Unable to remove volume [%s] because it is not hotpluggable", vol.Name)
	}
	di = -1
	for i, d := range disks {
		if d.Name == vol.Name {
			di = i
		}
	}
	return vi, di, nil
}

// volumeClaim is the claim (or DataVolume) a volume reads, "" for other sources.
func volumeClaim(vol v1.Volume) string {
	switch {
	case vol.PersistentVolumeClaim != nil:
		return vol.PersistentVolumeClaim.ClaimName
	case vol.DataVolume != nil:
		return vol.DataVolume.Name
	case vol.MemoryDump != nil:
		return vol.MemoryDump.ClaimName
	}
	return ""
}

func hotpluggable(vol v1.Volume) bool {
	return (vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.Hotpluggable) ||
		(vol.DataVolume != nil && vol.DataVolume.Hotpluggable)
}
