/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"encoding/base64"

	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/qvirt/qvirt/api/v1"
)

const (
	// cloudInitMaxLen is KubeVirt's inline limit for user and network data.
	cloudInitMaxLen = 2048
	// maxSATA is the number of ports of the one AHCI controller the launcher adds.
	maxSATA = 6
)

var supportedBuses = []v1.DiskBus{v1.DiskBusVirtio, v1.DiskBusSATA, v1.DiskBusSCSI}

func validateDisks(p *field.Path, disks []v1.Disk) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]int{}
	sata := 0
	for i, d := range disks {
		dp := p.Index(i)
		if other, ok := seen[d.Name]; ok {
			errs = append(errs, duplicate(dp.Child("name"), d.Name, "%s and %s must not have the same Name.", dp, p.Index(other)))
		} else {
			seen[d.Name] = i
		}
		// Disk names become QEMU ids and container names.
		for _, msg := range k8svalidation.IsDNS1123Label(d.Name) {
			errs = append(errs, invalid(dp.Child("name"), d.Name, "%s", msg))
		}
		kind, bus, targets := diskTarget(d)
		if targets > 1 {
			errs = append(errs, invalid(dp, nil, "%s can only have a single target type defined", dp))
		}
		if bus == v1.DiskBusSATA {
			sata++
		}
		errs = append(errs, validateBus(dp, d, kind, bus)...)
		if d.BootOrder != nil && *d.BootOrder < 1 {
			errs = append(errs, invalid(dp.Child("bootOrder"), *d.BootOrder, "%s must have a boot order > 0, if supplied", dp))
		}
		if d.Serial != "" {
			if !serialRE.MatchString(d.Serial) {
				errs = append(errs, invalid(dp.Child("serial"), d.Serial, "%s must be made up of the following characters [A-Za-z0-9_.+-], if specified", dp))
			}
			if len([]rune(d.Serial)) > maxStrLen {
				errs = append(errs, invalid(dp.Child("serial"), d.Serial, "%s must be less than or equal to %d in length, if specified", dp, maxStrLen))
			}
		}
	}
	if sata > maxSATA {
		errs = append(errs, tooMany(p, sata, "%s: qvirt supports at most %d devices on the sata bus (got %d)", p, maxSATA, sata))
	}
	return errs
}

// diskTarget names the device kind and bus of a disk and counts its targets.
func diskTarget(d v1.Disk) (kind string, bus v1.DiskBus, targets int) {
	if d.Disk != nil {
		kind, bus, targets = "disk", d.Disk.Bus, targets+1
	}
	if d.LUN != nil {
		kind, bus, targets = "lun", d.LUN.Bus, targets+1
	}
	if d.CDRom != nil {
		kind, bus, targets = "cdrom", d.CDRom.Bus, targets+1
	}
	return kind, bus, targets
}

func validateBus(dp *field.Path, d v1.Disk, kind string, bus v1.DiskBus) field.ErrorList {
	if bus == "" {
		return nil
	}
	bp := dp.Child(kind, "bus")
	switch bus {
	case v1.DiskBusVirtio:
		if kind == "cdrom" {
			return field.ErrorList{invalid(bp, bus, "Bus type %s is invalid for CD-ROM device", bus)}
		}
	case v1.DiskBusSATA:
		if d.Disk != nil && d.Disk.ReadOnly {
			return field.ErrorList{invalid(bp, bus, "%s hard-disks do not support read-only.", bus)}
		}
	case v1.DiskBusSCSI:
	case v1.DiskBusUSB:
		return field.ErrorList{unsupported(bp, "the usb disk bus")}
	case "ide":
		return field.ErrorList{invalid(bp, bus, "IDE bus is not supported")}
	default:
		return field.ErrorList{invalid(bp, bus, "%s is set with an unrecognized bus %s, must be one of: %v", dp, bus, supportedBuses)}
	}
	return nil
}

func validateVolumes(p *field.Path, volumes []v1.Volume, cfg Config) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]int{}
	for i, vol := range volumes {
		vp := p.Index(i)
		if vol.Name == "" {
			errs = append(errs, required(vp.Child("name"), "%s is a required field", vp.Child("name")))
		} else if other, ok := seen[vol.Name]; ok {
			errs = append(errs, duplicate(vp.Child("name"), vol.Name, "%s and %s must not have the same Name.", vp, p.Index(other)))
		} else {
			seen[vol.Name] = i
		}
		if n := countSources(vol.VolumeSource); n != 1 {
			errs = append(errs, invalid(vp, n, "%s must have exactly one source type set", vp))
		}
		errs = append(errs, validateVolumeSource(vp, vol.VolumeSource, cfg)...)
	}
	return errs
}

func countSources(s v1.VolumeSource) int {
	n := 0
	for _, set := range []bool{
		s.HostDisk != nil, s.PersistentVolumeClaim != nil, s.CloudInitNoCloud != nil,
		s.CloudInitConfigDrive != nil, s.ContainerDisk != nil, s.EmptyDisk != nil,
		s.DataVolume != nil, s.ConfigMap != nil, s.Secret != nil, s.ServiceAccount != nil,
		s.MemoryDump != nil,
	} {
		if set {
			n++
		}
	}
	return n
}

func validateVolumeSource(vp *field.Path, s v1.VolumeSource, cfg Config) field.ErrorList {
	var errs field.ErrorList
	if cd := s.ContainerDisk; cd != nil {
		if cd.Image == "" {
			ip := vp.Child("containerDisk", "image")
			errs = append(errs, required(ip, "%s is a required field", ip))
		}
		if cd.Path != "" {
			errs = append(errs, validateFilePath(vp.Child("containerDisk"), cd.Path)...)
		}
	}
	if ed := s.EmptyDisk; ed != nil && ed.Capacity.Sign() <= 0 {
		cp := vp.Child("emptyDisk", "capacity")
		errs = append(errs, required(cp, "%s must be greater than 0", cp))
	}
	if pvc := s.PersistentVolumeClaim; pvc != nil && pvc.ClaimName == "" {
		cp := vp.Child("persistentVolumeClaim", "claimName")
		errs = append(errs, required(cp, "%s is a required field", cp))
	}
	if md := s.MemoryDump; md != nil && md.ClaimName == "" {
		cp := vp.Child("memoryDump", "claimName")
		errs = append(errs, required(cp, "%s is a required field", cp))
	}
	if hd := s.HostDisk; hd != nil {
		errs = append(errs, validateHostDisk(vp, hd, cfg)...)
	}
	if ci := s.CloudInitNoCloud; ci != nil {
		errs = append(errs, validateCloudInit(vp.Child("cloudInitNoCloud"), ci)...)
	}
	return errs
}

func validateHostDisk(vp *field.Path, hd *v1.HostDisk, cfg Config) field.ErrorList {
	var errs field.ErrorList
	if !cfg.FeatureGateEnabled(FeatureGateHostDisk) {
		errs = append(errs, invalid(vp.Child("hostDisk"), nil, "HostDisk feature gate is not enabled"))
	}
	hp := vp.Child("hostDisk")
	if hd.Path == "" {
		errs = append(errs, required(hp.Child("path"), "%s is required for hostDisk volume", hp.Child("path")))
	} else {
		errs = append(errs, validateFilePath(hp.Child("path"), hd.Path)...)
	}
	switch hd.Type {
	case v1.HostDiskExists:
		if !hd.Capacity.IsZero() {
			errs = append(errs, invalid(hp.Child("capacity"), hd.Capacity.String(), "%s is allowed to pass only with %s equal to '%s'",
				hp.Child("capacity"), hp.Child("type"), v1.HostDiskExistsOrCreate))
		}
	case v1.HostDiskExistsOrCreate:
		// The launcher creates the image, so it needs a size.
		if hd.Capacity.Sign() <= 0 {
			errs = append(errs, required(hp.Child("capacity"), "%s is required when %s is '%s'", hp.Child("capacity"), hp.Child("type"), v1.HostDiskExistsOrCreate))
		}
	default:
		errs = append(errs, invalid(hp.Child("type"), hd.Type, "%s has invalid value '%s', allowed are '%s' or '%s'",
			hp.Child("type"), hd.Type, v1.HostDiskExists, v1.HostDiskExistsOrCreate))
	}
	return errs
}

// validateCloudInit is KubeVirt's rule: at most one source each for user and
// network data, valid base64, and inline data within 2 KiB.
func validateCloudInit(cp *field.Path, ci *v1.CloudInitNoCloudSource) field.ErrorList {
	var errs field.ErrorList
	count := func(secret bool, b64, plain string, b64Field string) (sources, length int) {
		if secret {
			sources++
		}
		if b64 != "" {
			sources++
			data, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				bp := cp.Child(b64Field)
				errs = append(errs, invalid(bp, nil, "%s is not a valid base64 value.", bp))
			}
			length = len(data)
		}
		if plain != "" {
			sources++
			length = len(plain)
		}
		return sources, length
	}
	userSources, userLen := count(ci.UserDataSecretRef != nil && ci.UserDataSecretRef.Name != "", ci.UserDataBase64, ci.UserData, "userDataBase64")
	netSources, netLen := count(ci.NetworkDataSecretRef != nil && ci.NetworkDataSecretRef.Name != "", ci.NetworkDataBase64, ci.NetworkData, "networkDataBase64")
	if userSources > 1 {
		errs = append(errs, invalid(cp, nil, "%s must have only one userdatasource set.", cp))
	}
	if netSources > 1 {
		errs = append(errs, invalid(cp, nil, "%s must have only one networkdata source set.", cp))
	}
	if userLen > cloudInitMaxLen {
		errs = append(errs, invalid(cp, userLen, "%s userdata exceeds %d byte limit. Should use UserDataSecretRef for larger data.", cp, cloudInitMaxLen))
	}
	if netLen > cloudInitMaxLen {
		errs = append(errs, invalid(cp, netLen, "%s networkdata exceeds %d byte limit. Should use NetworkDataSecretRef for larger data.", cp, cloudInitMaxLen))
	}
	if userSources == 0 && netSources == 0 {
		errs = append(errs, invalid(cp, nil, "%s must have at least one userdatasource or one networkdatasource set.", cp))
	}
	return errs
}

// validateDisksMatchVolumes wants every disk to name a volume and every volume
// to be used by a disk, but for memoryDump volumes, which no disk may name.
func validateDisksMatchVolumes(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	volumes := map[string]*v1.Volume{}
	for i := range spec.Volumes {
		volumes[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	disks := map[string]bool{}
	for i, d := range spec.Domain.Devices.Disks {
		disks[d.Name] = true
		dp := path.Child("domain", "devices", "disks").Index(i)
		switch v := volumes[d.Name]; {
		case v == nil:
			// KubeVirt capitalises Name in this message; the field is lower case.
			errs = append(errs, invalid(dp.Child("name"), d.Name, "%s '%s' not found.", dp.Child("Name"), d.Name))
		case v.MemoryDump != nil:
			errs = append(errs, invalid(dp.Child("name"), d.Name,
				"%s names memoryDump volume %s: QEMU writes memory dumps into it, the guest cannot see it as a disk", dp, d.Name))
		}
	}
	for i, v := range spec.Volumes {
		if v.Name != "" && !disks[v.Name] && v.MemoryDump == nil {
			np := path.Child("volumes").Index(i).Child("name")
			errs = append(errs, invalid(np, v.Name, "%s '%s' not found.", np, v.Name))
		}
	}
	return errs
}

// validateBootOrder wants boot orders unique across disks and interfaces.
func validateBootOrder(path *field.Path, spec *v1.VirtualMachineInstanceSpec) field.ErrorList {
	var errs field.ErrorList
	used := map[uint]bool{}
	check := func(p *field.Path, order *uint) {
		if order == nil || *order < 1 {
			return
		}
		if used[*order] {
			errs = append(errs, invalid(p, *order, "Boot order for %s already set for a different device.", p))
		}
		used[*order] = true
	}
	for i, d := range spec.Domain.Devices.Disks {
		check(path.Child("domain", "devices", "disks").Index(i).Child("bootOrder"), d.BootOrder)
	}
	for i, in := range spec.Domain.Devices.Interfaces {
		ip := path.Child("domain", "devices", "interfaces").Index(i)
		if in.BootOrder != nil && *in.BootOrder < 1 {
			errs = append(errs, invalid(ip.Child("bootOrder"), *in.BootOrder, "%s must have a boot order > 0, if supplied", ip))
		}
		check(ip.Child("bootOrder"), in.BootOrder)
	}
	return errs
}
