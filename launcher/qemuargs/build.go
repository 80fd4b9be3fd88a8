// Package qemuargs turns a launcher VMSpec into QEMU's command line. It is a pure function of the
// spec and the VM directory layout, so it is tested with golden files and needs no QEMU.
package qemuargs

import (
	"fmt"
	"strings"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// Build returns QEMU's argv (argv[0] is the binary). QEMU starts paused (-S) with no default
// devices, so nothing runs until the launcher has configured it over QMP and sent `cont`.
func Build(spec *launcherapi.VMSpec, l Layout) ([]string, error) {
	if errs := Validate(spec, l); len(errs) > 0 {
		return nil, fmt.Errorf("invalid VM spec: %w", errs.ToAggregate())
	}
	a := []string{l.Binary,
		"-name", opts("", "guest", guestName(spec), "debug-threads", "on"),
		"-S", "-nodefaults", "-no-user-config",
		// QEMU stays up when the guest powers off, so a soft reboot can reset it instead; the
		// launcher quits QEMU itself after an ordinary power-off.
		"-no-shutdown",
		"-msg", "timestamp=on",
		"-display", "none",
	}
	if l.Sandbox {
		a = append(a, "-sandbox", SandboxOptions)
	}
	a = append(a, machineArgs(spec)...)
	a = append(a, "-m", fmt.Sprintf("%dM", spec.MemoryBytes/mib))
	a = append(a, firmwareArgs(spec.Firmware)...)
	a = append(a, socketChardev{ID: "qmp", Path: l.QMPSocket()}.args()...)
	a = append(a, "-mon", "chardev=qmp,mode=control")
	// The spare root ports come before every device QEMU places itself (see hotplugTopSlot).
	a = append(a, hotplugPortArgs(spec)...)
	a = append(a, diskArgs(spec.Disks, spec.Hotplug != nil, l)...)
	a = append(a, nicArgs(spec.Interfaces, l)...)
	a = append(a, deviceArgs(spec.Devices, l)...)
	return a, nil
}

// SandboxOptions is QEMU's seccomp filter as libvirt sets it: besides obsolete system calls,
// QEMU may not gain privileges (setuid and the like), spawn processes, or change scheduling and
// resource limits. None of that is needed once QEMU runs: its taps arrive as descriptors.
const SandboxOptions = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"

// guestName is the QEMU process name; it shows in ps and in QEMU's own messages.
func guestName(spec *launcherapi.VMSpec) string {
	if spec.Namespace == "" {
		return spec.Name
	}
	return spec.Namespace + "_" + spec.Name
}

func machineArgs(spec *launcherapi.VMSpec) []string {
	mt := spec.MachineType
	if mt == "" {
		mt = "q35"
	}
	machine := mt
	if !spec.Acpi {
		machine += ",acpi=off"
	}
	accel, model := "kvm", "host"
	if spec.Accel == launcherapi.Accel_ACCEL_TCG {
		// Emulation has no host CPU to mirror; "max" gives the guest every feature TCG has. The
		// translation cache is capped at 16 MiB: its 1 GiB default dominates QEMU's RSS for small
		// guests, and a small guest's code fits.
		accel, model = "tcg,tb-size=16", "max"
	}
	if m := spec.GetCpu().GetModel(); m != "" && m != "host-model" && m != "host-passthrough" {
		model = m
	}
	cpu := spec.GetCpu()
	n := vcpus(cpu)
	return []string{
		"-machine", machine,
		"-accel", accel,
		"-cpu", model,
		"-smp", fmt.Sprintf("%d,sockets=%d,cores=%d,threads=%d", n, atLeast1(cpu.GetSockets()), atLeast1(cpu.GetCores()), atLeast1(cpu.GetThreads())),
	}
}

func firmwareArgs(fw *launcherapi.Firmware) []string {
	var a []string
	if fw.GetUuid() != "" {
		a = append(a, "-uuid", fw.Uuid)
	}
	if fw.GetSerial() != "" {
		a = append(a, "-smbios", opts("type=1", "serial", fw.Serial))
	}
	if kb := fw.GetKernelBoot(); kb != nil {
		a = append(a, "-kernel", kb.KernelPath)
		if kb.InitrdPath != "" {
			a = append(a, "-initrd", kb.InitrdPath)
		}
		if kb.Cmdline != "" {
			a = append(a, "-append", kb.Cmdline)
		}
	}
	return a
}

// diskArgs renders the disks and their controllers; hotplug adds the SCSI controller even
// without a cold-plugged SCSI disk, for the disks to come.
func diskArgs(disks []*launcherapi.Disk, hotplug bool, l Layout) []string {
	var a []string
	var hasSATA, hasSCSI bool
	for _, d := range disks {
		hasSATA = hasSATA || d.Bus == launcherapi.Bus_BUS_SATA
		hasSCSI = hasSCSI || d.Bus == launcherapi.Bus_BUS_SCSI
	}
	// Own controllers rather than the machine's built-in ones, so q35 and pc name buses alike.
	if hasSATA {
		a = append(a, "-device", "ahci,id=sata0")
	}
	if hasSCSI || hotplug {
		a = append(a, "-device", "virtio-scsi-pci,id=scsi0")
	}
	sataPort, scsiLUN := 0, 0
	for i, d := range disks {
		img := l.DiskImage(d)
		cdrom := d.Device == launcherapi.DiskDevice_DISK_DEVICE_CDROM
		bd := blockDevice{
			Index:     i,
			Name:      d.Name,
			Path:      img.Path,
			Block:     img.BlockDevice,
			Format:    formatName(img.Format),
			ReadOnly:  d.ReadOnly || cdrom || isSeed(d),
			BootIndex: d.BootOrder,
			Serial:    d.Serial,
		}
		switch d.Bus {
		case launcherapi.Bus_BUS_VIRTIO:
			bd.Driver = "virtio-blk-pci"
		case launcherapi.Bus_BUS_SATA:
			bd.Driver, bd.Bus = pick(cdrom, "ide-cd", "ide-hd"), fmt.Sprintf("sata0.%d", sataPort)
			sataPort++
		case launcherapi.Bus_BUS_SCSI:
			bd.Driver, bd.Bus, bd.LUN = pick(cdrom, "scsi-cd", "scsi-hd"), SCSIBus, fmt.Sprint(scsiLUN)
			scsiLUN++
		}
		a = append(a, bd.args()...)
	}
	return a
}

func isSeed(d *launcherapi.Disk) bool {
	_, ok := d.Source.(*launcherapi.Disk_CloudInitNoCloud)
	return ok
}

func nicArgs(ifaces []*launcherapi.Interface, l Layout) []string {
	var a []string
	for i, in := range ifaces {
		a = append(a, tapNIC{Index: i, Name: in.Name, FD: l.TapFDs[in.TapFdName], MAC: strings.ToLower(in.MacAddress), BootIndex: in.BootOrder}.args()...)
	}
	return a
}

func deviceArgs(dev *launcherapi.Devices, l Layout) []string {
	var a []string
	if dev.GetSerialConsole() {
		// The log keeps what the guest printed while no console client was attached; QEMU
		// writes it into the launcher's descriptor, and the launcher caps the file.
		var logFile string
		if l.SerialLogFD > 0 {
			logFile = fmt.Sprintf("/dev/fd/%d", l.SerialLogFD)
		}
		a = append(a, socketChardev{ID: "serial0", Path: l.SerialSocket(), LogFile: logFile}.args()...)
		a = append(a, "-serial", "chardev:serial0")
	}
	if dev.GetVnc() {
		a = append(a, "-device", "VGA,id=video0", "-vnc", "unix:"+l.VNCSocket())
	}
	if dev.GetMemBalloon() {
		a = append(a, "-device", "virtio-balloon-pci,id=balloon0")
	}
	if dev.GetRng() {
		a = append(a, "-object", "rng-random,id=objrng0,filename=/dev/urandom", "-device", "virtio-rng-pci,rng=objrng0,id=rng0")
	}
	if dev.GetGuestAgent() {
		// The channel KubeVirt gives every VM; the guest's qemu-ga finds it by its name.
		a = append(a, "-device", "virtio-serial-pci,id=virtio-serial0")
		a = append(a, socketChardev{ID: "qga0", Path: l.GuestAgentSocket()}.args()...)
		a = append(a, "-device", "virtserialport,bus=virtio-serial0.0,chardev=qga0,name=org.qemu.guest_agent.0,id=channel0")
	}
	if vs := dev.GetVsock(); vs != nil {
		// QEMU gets /dev/vhost-vsock open: the launcher's container has no access to the device.
		a = append(a, "-device", fmt.Sprintf("vhost-vsock-pci,id=vsock0,guest-cid=%d,vhostfd=%d", vs.GuestCid, l.TapFDs[vs.VhostFdName]))
	}
	return a
}

func formatName(f launcherapi.ImageFormat) string {
	if f == launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2 {
		return "qcow2"
	}
	return "raw"
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}
