package testenv

import launcherapi "github.com/qvirt/qvirt/launcher/api"

// LauncherSpec is a launcher VM spec of the guest as its tests boot it: kernel boot under
// emulation, a 1-vCPU q35 machine with memoryMiB of RAM, its disk as a containerDisk (an
// overlay on the shared qcow2) and a serial console.
func (g Guest) LauncherSpec(name string, memoryMiB uint64) *launcherapi.VMSpec {
	return &launcherapi.VMSpec{
		Namespace: "test", Name: name, MachineType: "q35", Accel: launcherapi.Accel_ACCEL_TCG,
		Cpu: &launcherapi.CPU{Sockets: 1, Cores: 1, Threads: 1}, MemoryBytes: memoryMiB << 20, Acpi: true,
		Firmware: &launcherapi.Firmware{KernelBoot: &launcherapi.KernelBoot{KernelPath: g.Kernel, InitrdPath: g.Initrd, Cmdline: "console=ttyS0 quiet"}},
		Disks: []*launcherapi.Disk{{Name: "rootdisk", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_ContainerDisk{
			ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: g.Disk, BaseFormat: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}}},
		Devices: &launcherapi.Devices{SerialConsole: true},
	}
}
