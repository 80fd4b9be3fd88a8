/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"encoding/json"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// Hotplugged volumes (persistentVolumeClaim volumes with hotpluggable: true, and memoryDump
// volumes) are attached to the running VM by virt-handler rather than given to it in the
// launcher pod, whether they are in the spec from the start or added later. The rules are
// KubeVirt's; dataVolume volumes stay refused, hotpluggable or not (qvirt has no CDI).

var hotplugBuses = []v1.DiskBus{v1.DiskBusSCSI, v1.DiskBusVirtio}

// validateHotplugVolumes checks the hotplugged volumes of a spec (after defaults) and their
// disks.
func validateHotplugVolumes(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	hot := map[string]bool{}
	dumps := 0
	for _, v := range spec.Volumes {
		hot[v.Name] = v.IsHotplugged() && v.MemoryDump == nil
		if v.MemoryDump != nil {
			dumps++
		}
	}
	if dumps > 1 {
		vp := path.Child("volumes")
		errs = append(errs, invalid(vp, dumps, "%s must have max one memory dump volume set", vp))
	}
	attached := false
	for i, d := range spec.Domain.Devices.Disks {
		if hot[d.Name] {
			attached = true
			errs = append(errs, validateHotplugDisk(path.Child("domain", "devices", "disks").Index(i), d)...)
		}
	}
	if attached && spec.Domain.Devices.DisableHotplug {
		// The VM then starts without the scsi controller and root ports a hotplugged disk needs.
		dp := path.Child("domain", "devices", "disableHotplug")
		errs = append(errs, invalid(dp, true, "%s is true: the VM has no room for hotplugged disks", dp))
	}
	return errs
}

// validateHotplugDisk wants the disk of a hotplugged volume to be a disk on a bus QEMU can
// hotplug on.
func validateHotplugDisk(dp *field.Path, d v1.Disk) field.ErrorList {
	kind, bus, _ := diskTarget(d)
	switch {
	case kind != "disk":
		return field.ErrorList{invalid(dp, kind, "Hotplug configuration for [%s] requires diskDevice of type 'disk' to be used.", d.Name)}
	case !slices.Contains(hotplugBuses, bus):
		return field.ErrorList{invalid(dp.Child("disk", "bus"), bus,
			"Hotplug configuration for disk [%s] requires bus to be 'scsi' or 'virtio'. [%s] is not permitted.", d.Name, bus)}
	}
	return nil
}

// validateHotplugUpdate lets qvirt's components change an existing VMI's spec only as hotplug
// does: hotplugged volumes and their disks come and go, and a stop with a grace period shortens
// terminationGracePeriodSeconds. Any other change would leave the running VM behind its spec.
func validateHotplugUpdate(path *field.Path, old, new *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	if o, n := fixedPart(old), fixedPart(new); !equality.Semantic.DeepEqual(o, n) {
		p := firstDifference(path, o, n)
		errs = append(errs, forbidden(p, "%s cannot change on an existing VMI: only hotplugged volumes and their disks may be added or removed", p))
	}
	errs = append(errs, validateVolumeChanges(path, old, new)...)
	errs = append(errs, validateDiskChanges(path, old, new)...)
	untouched := equality.Semantic.DeepEqual(old.Volumes, new.Volumes) && equality.Semantic.DeepEqual(old.Domain.Devices.Disks, new.Domain.Devices.Disks)
	if len(errs) > 0 || untouched {
		return errs
	}
	// What was added must be as sound as at creation.
	devices := path.Child("domain", "devices")
	errs = append(errs, validateDisks(devices.Child("disks"), new.Domain.Devices.Disks)...)
	errs = append(errs, validateDisksMatchVolumes(path, new)...)
	errs = append(errs, validateHotplugVolumes(path, new)...)
	oldDisks := disksByName(old)
	for i, d := range new.Domain.Devices.Disks {
		if _, ok := oldDisks[d.Name]; !ok {
			errs = append(errs, unsupportedInDisk(devices.Child("disks").Index(i), d)...)
		}
	}
	return errs
}

// fixedPart is what hotplug leaves alone in a VMI's spec.
func fixedPart(spec *v1.VirtualMachineInstanceSpec) *v1.VirtualMachineInstanceSpec {
	s := spec.DeepCopy()
	s.Volumes, s.Domain.Devices.Disks, s.TerminationGracePeriodSeconds = nil, nil, nil
	return s
}

// validateVolumeChanges wants the volumes that stay unchanged, the permanent ones kept, and
// every added one hotplugged.
func validateVolumeChanges(path *field.Path, old, new *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	oldVols := volumesByName(old)
	seen := map[string]bool{}
	for i, v := range new.Volumes {
		vp := path.Child("volumes").Index(i)
		if seen[v.Name] {
			errs = append(errs, duplicate(vp.Child("name"), v.Name, "%s: volume %s is there twice", vp, v.Name))
			continue
		}
		seen[v.Name] = true
		ov, existed := oldVols[v.Name]
		switch {
		case existed && !equality.Semantic.DeepEqual(*ov, v) && ov.IsHotplugged():
			errs = append(errs, forbidden(vp, "hotplug volume %s, changed", v.Name))
		case existed && !equality.Semantic.DeepEqual(*ov, v):
			errs = append(errs, forbidden(vp, "permanent volume %s, changed", v.Name))
		case !existed && !v.IsHotplugged():
			errs = append(errs, forbidden(vp, "volume %s cannot be added to an existing VMI: only persistentVolumeClaim volumes with hotpluggable: true and memoryDump volumes can", v.Name))
		case !existed:
			if n := countSources(v.VolumeSource); n != 1 {
				errs = append(errs, invalid(vp, n, "%s must have exactly one source type set", vp))
			}
			// Only claims get here: no feature gate applies.
			errs = append(errs, validateVolumeSource(vp, v.VolumeSource, StaticConfig{})...)
			errs = append(errs, unsupportedVolumeSource(vp, v.VolumeSource)...)
		}
	}
	newVols := volumesByName(new)
	for _, v := range old.Volumes {
		if _, kept := newVols[v.Name]; !kept && !v.IsHotplugged() {
			p := path.Child("volumes")
			errs = append(errs, forbidden(p, "permanent volume %s cannot be removed from an existing VMI", v.Name))
		}
	}
	return errs
}

// validateDiskChanges wants the disks that stay unchanged, and only the disks of hotplugged
// volumes coming or going with them.
func validateDiskChanges(path *field.Path, old, new *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	oldDisks, newDisks := disksByName(old), disksByName(new)
	oldVols, newVols := volumesByName(old), volumesByName(new)
	hotplugged := func(vols map[string]*v1.Volume, name string) bool {
		return vols[name] != nil && vols[name].IsHotplugged()
	}
	for i, d := range new.Domain.Devices.Disks {
		dp := path.Child("domain", "devices", "disks").Index(i)
		od, existed := oldDisks[d.Name]
		switch {
		case existed && !equality.Semantic.DeepEqual(*od, d) && hotplugged(oldVols, d.Name):
			errs = append(errs, forbidden(dp, "hotplug disk %s, changed", d.Name))
		case existed && !equality.Semantic.DeepEqual(*od, d):
			errs = append(errs, forbidden(dp, "permanent disk %s, changed", d.Name))
		case !existed && (oldVols[d.Name] != nil || !hotplugged(newVols, d.Name)):
			errs = append(errs, forbidden(dp, "disk %s cannot be added to an existing VMI but with the hotplugged volume it shows", d.Name))
		}
	}
	for _, d := range old.Domain.Devices.Disks {
		if _, kept := newDisks[d.Name]; !kept && (newVols[d.Name] != nil || !hotplugged(oldVols, d.Name)) {
			p := path.Child("domain", "devices", "disks")
			errs = append(errs, forbidden(p, "disk %s cannot be removed from an existing VMI but with the hotplugged volume it shows", d.Name))
		}
	}
	return errs
}

func volumesByName(spec *v1.VirtualMachineInstanceSpec) map[string]*v1.Volume {
	m := map[string]*v1.Volume{}
	for i := range spec.Volumes {
		m[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	return m
}

func disksByName(spec *v1.VirtualMachineInstanceSpec) map[string]*v1.Disk {
	m := map[string]*v1.Disk{}
	for i := range spec.Domain.Devices.Disks {
		m[spec.Domain.Devices.Disks[i].Name] = &spec.Domain.Devices.Disks[i]
	}
	return m
}

// firstDifference is the path of the first field in which a and b differ, as JSON; path when
// only their Go values do.
func firstDifference(path *field.Path, a, b any) *field.Path {
	var x, y any
	ab, errA := json.Marshal(a)
	bb, errB := json.Marshal(b)
	if errA != nil || errB != nil || json.Unmarshal(ab, &x) != nil || json.Unmarshal(bb, &y) != nil {
		return path
	}
	if p := jsonDifference(path, x, y); p != nil {
		return p
	}
	return path
}

func jsonDifference(p *field.Path, x, y any) *field.Path {
	switch xv := x.(type) {
	case map[string]any:
		yv, ok := y.(map[string]any)
		if !ok {
			return p
		}
		keys := slices.Sorted(maps.Keys(xv))
		for k := range yv {
			if _, ok := xv[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if d := jsonDifference(p.Child(k), xv[k], yv[k]); d != nil {
				return d
			}
		}
		return nil
	case []any:
		yv, ok := y.([]any)
		if !ok {
			return p
		}
		for i := range min(len(xv), len(yv)) {
			if d := jsonDifference(p.Index(i), xv[i], yv[i]); d != nil {
				return d
			}
		}
		if len(xv) != len(yv) {
			return p
		}
		return nil
	}
	if equality.Semantic.DeepEqual(x, y) {
		return nil
	}
	return p
}
