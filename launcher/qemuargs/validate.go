package qemuargs

import (
	"fmt"
	"net"
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

const (
	mib = 1 << 20
	// maxVCPUs is what q35 supports without an IOMMU for x2APIC.
	maxVCPUs = 255
	// maxSATA is the number of ports of one AHCI controller.
	maxSATA = 6
)

// QEMU ids must start with a letter and contain only letters, digits, '-', '.', '_'.
var (
	nameRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.-]{0,62}$`)
	cpuModelRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
)

// Validate checks a spec against what the command line can express. Field paths use the
// protobuf field names under "spec".
func Validate(spec *launcherapi.VMSpec, l Layout) field.ErrorList {
	root := field.NewPath("spec")
	var errs field.ErrorList
	if spec == nil {
		return field.ErrorList{field.Required(root, "a VM spec is required")}
	}
	switch spec.MachineType {
	case "", "q35", "pc":
	default:
		errs = append(errs, field.NotSupported(root.Child("machine_type"), spec.MachineType, []string{"q35", "pc"}))
	}
	switch spec.Accel {
	case launcherapi.Accel_ACCEL_UNSPECIFIED, launcherapi.Accel_ACCEL_KVM, launcherapi.Accel_ACCEL_TCG:
	default:
		errs = append(errs, field.NotSupported(root.Child("accel"), spec.Accel.String(), []string{"ACCEL_KVM", "ACCEL_TCG"}))
	}
	errs = append(errs, validateCPU(spec.Cpu, root.Child("cpu"))...)
	switch {
	case spec.MemoryBytes == 0:
		errs = append(errs, field.Required(root.Child("memory_bytes"), "guest memory must be set"))
	case spec.MemoryBytes%mib != 0:
		errs = append(errs, field.Invalid(root.Child("memory_bytes"), spec.MemoryBytes, "must be a whole number of MiB"))
	case spec.MemoryBytes < 16*mib:
		errs = append(errs, field.Invalid(root.Child("memory_bytes"), spec.MemoryBytes, "must be at least 16 MiB"))
	}
	if kb := spec.GetFirmware().GetKernelBoot(); kb != nil && kb.KernelPath == "" {
		errs = append(errs, field.Required(root.Child("firmware", "kernel_boot", "kernel_path"), "kernel boot needs a kernel"))
	}
	errs = append(errs, validateDisks(spec.Disks, root.Child("disks"))...)
	errs = append(errs, validateHotplug(spec, root.Child("hotplug"))...)
	errs = append(errs, validateInterfaces(spec.Interfaces, l, root.Child("interfaces"))...)
	if vs := spec.GetDevices().GetVsock(); vs != nil {
		vp := root.Child("devices", "vsock")
		if vs.GuestCid < 3 {
			errs = append(errs, field.Invalid(vp.Child("guest_cid"), vs.GuestCid, "context IDs 0-2 are reserved"))
		}
		if _, ok := l.TapFDs[vs.VhostFdName]; !ok {
			errs = append(errs, field.NotFound(vp.Child("vhost_fd_name"), vs.VhostFdName))
		}
	}
	return errs
}

func validateCPU(cpu *launcherapi.CPU, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if cpu == nil {
		return nil
	}
	if n := vcpus(cpu); n > maxVCPUs {
		errs = append(errs, field.Invalid(p, n, fmt.Sprintf("sockets*cores*threads must not exceed %d", maxVCPUs)))
	}
	if m := cpu.Model; m != "" && m != "host-model" && m != "host-passthrough" && !cpuModelRE.MatchString(m) {
		errs = append(errs, field.Invalid(p.Child("model"), m, "not a CPU model name"))
	}
	return errs
}

// diskNameError is what is wrong with a disk's name, given the names before it; nil if nothing.
func diskNameError(name string, names map[string]bool, p *field.Path) *field.Error {
	switch {
	case name == "":
		return field.Required(p, "a disk needs a name")
	case !nameRE.MatchString(name):
		return field.Invalid(p, name, "must start with a letter and use only letters, digits, '-', '.', '_' (at most 63)")
	case names[name]:
		return field.Duplicate(p, name)
	}
	return nil
}

func validateDisks(disks []*launcherapi.Disk, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	sata := 0
	for i, d := range disks {
		dp := p.Index(i)
		if err := diskNameError(d.Name, names, dp.Child("name")); err != nil {
			errs = append(errs, err)
		}
		names[d.Name] = true
		switch d.Bus {
		case launcherapi.Bus_BUS_VIRTIO:
			if d.Device == launcherapi.DiskDevice_DISK_DEVICE_CDROM {
				errs = append(errs, field.Invalid(dp.Child("bus"), "virtio", "a cdrom cannot be on the virtio bus; use sata or scsi"))
			}
		case launcherapi.Bus_BUS_SATA:
			sata++
		case launcherapi.Bus_BUS_SCSI:
		case launcherapi.Bus_BUS_UNSPECIFIED:
			errs = append(errs, field.Required(dp.Child("bus"), "a disk needs a bus"))
		default:
			errs = append(errs, field.NotSupported(dp.Child("bus"), d.Bus.String(), []string{"BUS_VIRTIO", "BUS_SATA", "BUS_SCSI"}))
		}
		if d.Device != launcherapi.DiskDevice_DISK_DEVICE_DISK && d.Device != launcherapi.DiskDevice_DISK_DEVICE_CDROM {
			errs = append(errs, field.NotSupported(dp.Child("device"), d.Device.String(), []string{"DISK_DEVICE_DISK", "DISK_DEVICE_CDROM"}))
		}
		errs = append(errs, validateSource(d, dp)...)
	}
	if sata > maxSATA {
		errs = append(errs, field.TooMany(p, sata, maxSATA))
	}
	return errs
}

func validateSource(d *launcherapi.Disk, dp *field.Path) field.ErrorList {
	switch src := d.Source.(type) {
	case nil:
		return field.ErrorList{field.Required(dp.Child("source"), "a disk needs a source: container_disk, file, empty_disk or cloud_init_no_cloud")}
	case *launcherapi.Disk_ContainerDisk:
		if src.ContainerDisk.GetBasePath() == "" {
			return field.ErrorList{field.Required(dp.Child("container_disk", "base_path"), "a container disk needs its base image file")}
		}
		return validFormat(src.ContainerDisk.GetBaseFormat(), dp.Child("container_disk", "base_format"))
	case *launcherapi.Disk_File:
		if src.File.GetPath() == "" {
			return field.ErrorList{field.Required(dp.Child("file", "path"), "a file disk needs a path")}
		}
		// A file used in place (hostDisk, a claim's disk.img) is written by the guest, so it is
		// raw: as qcow2, a header the guest wrote would name the backing file QEMU opens.
		if f := src.File.GetFormat(); f != launcherapi.ImageFormat_IMAGE_FORMAT_RAW {
			return field.ErrorList{field.NotSupported(dp.Child("file", "format"), f.String(), []string{"IMAGE_FORMAT_RAW"})}
		}
	case *launcherapi.Disk_EmptyDisk:
		if c := src.EmptyDisk.GetCapacityBytes(); c == 0 {
			return field.ErrorList{field.Required(dp.Child("empty_disk", "capacity_bytes"), "an empty disk needs a capacity")}
		}
	case *launcherapi.Disk_Fd:
		return field.ErrorList{field.Invalid(dp.Child("fd"), src.Fd.GetFdName(), "a disk handed in as a descriptor is only hotplugged (HotplugDisks), never there at start")}
	}
	return nil
}

func validFormat(f launcherapi.ImageFormat, p *field.Path) field.ErrorList {
	if f != launcherapi.ImageFormat_IMAGE_FORMAT_RAW && f != launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2 {
		return field.ErrorList{field.NotSupported(p, f.String(), []string{"IMAGE_FORMAT_RAW", "IMAGE_FORMAT_QCOW2"})}
	}
	return nil
}

func validateInterfaces(ifaces []*launcherapi.Interface, l Layout, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, in := range ifaces {
		ip := p.Index(i)
		switch {
		case in.Name == "":
			errs = append(errs, field.Required(ip.Child("name"), "an interface needs a name"))
		case !nameRE.MatchString(in.Name):
			errs = append(errs, field.Invalid(ip.Child("name"), in.Name, "must start with a letter and use only letters, digits, '-', '.', '_' (at most 63)"))
		case names[in.Name]:
			errs = append(errs, field.Duplicate(ip.Child("name"), in.Name))
		}
		names[in.Name] = true
		if in.Model != "" && in.Model != "virtio" {
			errs = append(errs, field.NotSupported(ip.Child("model"), in.Model, []string{"virtio"}))
		}
		if in.MacAddress != "" {
			hw, err := net.ParseMAC(in.MacAddress)
			switch {
			case err != nil || len(hw) != 6:
				errs = append(errs, field.Invalid(ip.Child("mac_address"), in.MacAddress, "not a 48-bit MAC address"))
			case hw[0]&1 == 1:
				errs = append(errs, field.Invalid(ip.Child("mac_address"), in.MacAddress, "must be a unicast address"))
			}
		}
		if in.TapFdName == "" {
			errs = append(errs, field.Required(ip.Child("tap_fd_name"), "an interface needs a tap file descriptor"))
		} else if _, ok := l.TapFDs[in.TapFdName]; !ok {
			errs = append(errs, field.NotFound(ip.Child("tap_fd_name"), in.TapFdName))
		}
	}
	for name, fd := range l.TapFDs {
		if l.SerialLogFD != 0 && fd == l.SerialLogFD {
			errs = append(errs, field.Duplicate(field.NewPath("layout", "serial_log_fd"), fmt.Sprintf("%d, the descriptor of tap %s", fd, name)))
		}
	}
	return errs
}

func vcpus(cpu *launcherapi.CPU) uint32 {
	return atLeast1(cpu.GetSockets()) * atLeast1(cpu.GetCores()) * atLeast1(cpu.GetThreads())
}

func atLeast1(v uint32) uint32 {
	if v == 0 {
		return 1
	}
	return v
}
