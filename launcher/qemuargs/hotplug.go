package qemuargs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// Room for disks attached while the VM runs (VMSpec.hotplug): the SCSI controller, and on q35
// spare PCIe root ports, since q35's root bus takes no hotplugged devices. On "pc" the root
// bus itself takes them (ACPI hotplug).

const (
	// SCSIBus is the bus of the virtio-scsi controller every SCSI disk sits on, cold-plugged
	// ones at LUNs 0, 1, ... in the order of the spec's disks.
	SCSIBus = "scsi0.0"
	// PCRootBus is where hotplugged virtio disks go on machine "pc".
	PCRootBus = "pci.0"
	// MaxHotplugPorts is how many root ports fit the slots set aside for them.
	MaxHotplugPorts = 32
	// hotplugTopSlot is the highest free slot of q35's root bus (0x1f is the ICH9's). Root
	// ports fill it and the slots below, eight functions each, so they stay clear of the
	// devices QEMU places itself, which take the lowest free slots; and as they come before
	// those devices on the command line, QEMU places the others around them.
	hotplugTopSlot = 0x1e
)

// HotplugPort is the id (and bus name) of spare root port i.
func HotplugPort(i int) string { return fmt.Sprintf("hotplug-port%d", i) }

// HotplugPorts is the number of spare root ports QEMU has for spec.
func HotplugPorts(spec *launcherapi.VMSpec) int {
	if !isQ35(spec) {
		return 0
	}
	return int(spec.GetHotplug().GetPcieRootPorts())
}

func isQ35(spec *launcherapi.VMSpec) bool {
	return spec.MachineType == "" || spec.MachineType == "q35"
}

func hotplugPortArgs(spec *launcherapi.VMSpec) []string {
	n := HotplugPorts(spec)
	var a []string
	for i := 0; i < n; i++ {
		slot, fn := hotplugTopSlot-i/8, i%8
		// Chassis numbers tell the ports apart (each has slot 0 of its own chassis); no other
		// device on the command line sets one.
		dev := fmt.Sprintf("pcie-root-port,id=%s,bus=pcie.0,chassis=%d,port=%d,addr=0x%x.%d", HotplugPort(i), i+1, i+1, slot, fn)
		if fn == 0 && i+1 < n {
			dev += ",multifunction=on"
		}
		a = append(a, "-device", dev)
	}
	return a
}

func validateHotplug(spec *launcherapi.VMSpec, p *field.Path) field.ErrorList {
	n := spec.GetHotplug().GetPcieRootPorts()
	switch {
	case n > MaxHotplugPorts:
		return field.ErrorList{field.TooMany(p.Child("pcie_root_ports"), int(n), MaxHotplugPorts)}
	case n > 0 && !isQ35(spec):
		return field.ErrorList{field.Invalid(p.Child("pcie_root_ports"), n, "PCIe root ports need machine q35; on pc virtio disks are hotplugged onto the root bus")}
	}
	return nil
}

// ValidateHotplugDisks checks disks to attach to the running VM of spec, each on its own: the
// i-th list holds the problems of disks[i], at field paths under p (the request's disks).
func ValidateHotplugDisks(spec *launcherapi.VMSpec, disks []*launcherapi.Disk, p *field.Path) []field.ErrorList {
	cold := map[string]bool{}
	for _, d := range spec.GetDisks() {
		cold[d.Name] = true
	}
	names := map[string]bool{}
	out := make([]field.ErrorList, len(disks))
	for i, d := range disks {
		var errs field.ErrorList
		dp := p.Index(i)
		if err := diskNameError(d.Name, names, dp.Child("name")); err != nil {
			errs = append(errs, err)
		} else if cold[d.Name] {
			errs = append(errs, field.Invalid(dp.Child("name"), d.Name, "the VM started with a disk of this name"))
		}
		names[d.Name] = true
		switch d.Bus {
		case launcherapi.Bus_BUS_VIRTIO, launcherapi.Bus_BUS_SCSI:
		case launcherapi.Bus_BUS_SATA:
			errs = append(errs, field.Invalid(dp.Child("bus"), "sata", "SATA disks cannot be hotplugged; use scsi or virtio"))
		case launcherapi.Bus_BUS_UNSPECIFIED:
			errs = append(errs, field.Required(dp.Child("bus"), "a disk needs a bus"))
		default:
			errs = append(errs, field.NotSupported(dp.Child("bus"), d.Bus.String(), []string{"BUS_VIRTIO", "BUS_SCSI"}))
		}
		if d.Device != launcherapi.DiskDevice_DISK_DEVICE_DISK {
			errs = append(errs, field.NotSupported(dp.Child("device"), d.Device.String(), []string{"DISK_DEVICE_DISK"}))
		}
		if d.BootOrder != 0 {
			errs = append(errs, field.Forbidden(dp.Child("boot_order"), "a hotplugged disk is not booted from"))
		}
		src, ok := d.Source.(*launcherapi.Disk_Fd)
		switch {
		case !ok:
			errs = append(errs, field.Required(dp.Child("fd"), "a hotplugged disk is handed in as a descriptor"))
		case src.Fd.GetFdName() == "":
			errs = append(errs, field.Required(dp.Child("fd", "fd_name"), "the name the descriptor was handed in under"))
		default:
			errs = append(errs, validFormat(src.Fd.GetFormat(), dp.Child("fd", "format"))...)
		}
		out[i] = errs
	}
	return out
}
