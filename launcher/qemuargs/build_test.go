package qemuargs

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const gib = 1 << 30

func base() *launcherapi.VMSpec {
	return &launcherapi.VMSpec{
		Namespace:   "default",
		Name:        "testvm",
		MachineType: "q35",
		Accel:       launcherapi.Accel_ACCEL_TCG,
		Cpu:         &launcherapi.CPU{Sockets: 1, Cores: 1, Threads: 1},
		MemoryBytes: 128 * mib,
		Acpi:        true,
	}
}

func with(mut func(s *launcherapi.VMSpec)) *launcherapi.VMSpec {
	s := base()
	mut(s)
	return s
}

func containerDisk(name string, bus launcherapi.Bus) *launcherapi.Disk {
	return &launcherapi.Disk{Name: name, Bus: bus, Source: &launcherapi.Disk_ContainerDisk{
		ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: "/images/" + name + ".qcow2", BaseFormat: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}}
}

func testLayout() Layout {
	l := NewLayout("/run/qvirt/vm1")
	l.TapFDs = map[string]int{"tap0": 3, "tap1": 4}
	l.SerialLogFD = 5
	l.Sandbox = true
	return l
}

func TestBuildWithoutSandbox(t *testing.T) {
	l := testLayout()
	l.Sandbox = false
	argv, err := Build(base(), l)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(argv, " "), "-sandbox") {
		t.Fatalf("argv %q has a sandbox the layout did not ask for", argv)
	}
}

func TestBuildGolden(t *testing.T) {
	cases := map[string]*launcherapi.VMSpec{
		"minimal-tcg": base(),
		"kvm-host-model": with(func(s *launcherapi.VMSpec) {
			s.Accel = launcherapi.Accel_ACCEL_KVM
			s.Cpu.Model = "host-model"
		}),
		"pc-no-acpi-named-model": with(func(s *launcherapi.VMSpec) {
			s.MachineType = "pc"
			s.Acpi = false
			s.Cpu = &launcherapi.CPU{Sockets: 2, Cores: 2, Threads: 2, Model: "Skylake-Client"}
			s.MemoryBytes = 2 * gib
		}),
		"kernel-boot": with(func(s *launcherapi.VMSpec) {
			s.Firmware = &launcherapi.Firmware{
				Uuid:       "5d307ca9-b3ef-428c-8861-06e72d69f223",
				Serial:     "serial,with,commas",
				KernelBoot: &launcherapi.KernelBoot{KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img", Cmdline: "console=ttyS0 quiet"},
			}
		}),
		"container-disk-virtio": with(func(s *launcherapi.VMSpec) {
			d := containerDisk("rootdisk", launcherapi.Bus_BUS_VIRTIO)
			d.BootOrder = 1
			d.Serial = "ROOT01"
			s.Disks = []*launcherapi.Disk{d}
		}),
		"sata-disks-and-cdrom": with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{
				containerDisk("root", launcherapi.Bus_BUS_SATA),
				{Name: "seed", Bus: launcherapi.Bus_BUS_SATA, Device: launcherapi.DiskDevice_DISK_DEVICE_CDROM,
					Source: &launcherapi.Disk_CloudInitNoCloud{CloudInitNoCloud: &launcherapi.CloudInitNoCloudSource{UserData: "#!/bin/sh\n"}}},
			}
		}),
		"scsi-host-and-empty": with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{
				{Name: "host", Bus: launcherapi.Bus_BUS_SCSI, Source: &launcherapi.Disk_File{File: &launcherapi.FileSource{Path: "/var/data/disk.img"}}},
				{Name: "scratch", Bus: launcherapi.Bus_BUS_SCSI, Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: gib}}},
			}
		}),
		"pvc-readonly-raw": with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{{Name: "data", Bus: launcherapi.Bus_BUS_VIRTIO, ReadOnly: true,
				Source: &launcherapi.Disk_File{File: &launcherapi.FileSource{Path: "/pvc/data/disk.img", Format: launcherapi.ImageFormat_IMAGE_FORMAT_RAW}}}}
		}),
		"cloud-init-virtio": with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{
				containerDisk("root", launcherapi.Bus_BUS_VIRTIO),
				{Name: "cloudinitdisk", Bus: launcherapi.Bus_BUS_VIRTIO,
					Source: &launcherapi.Disk_CloudInitNoCloud{CloudInitNoCloud: &launcherapi.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}},
			}
		}),
		"two-nics": with(func(s *launcherapi.VMSpec) {
			s.Interfaces = []*launcherapi.Interface{
				{Name: "default", MacAddress: "02:00:00:AA:BB:CC", TapFdName: "tap0"},
				{Name: "second", Model: "virtio", TapFdName: "tap1", BootOrder: 2},
			}
		}),
		"all-devices": with(func(s *launcherapi.VMSpec) {
			s.Devices = &launcherapi.Devices{SerialConsole: true, Vnc: true, MemBalloon: true, Rng: true}
		}),
		// Nine ports: a full slot of eight functions below the ICH9, and one in the next slot
		// down; the SCSI controller is there with the cold-plugged SCSI disk keeping LUN 0.
		"hotplug-q35": with(func(s *launcherapi.VMSpec) {
			s.Hotplug = &launcherapi.Hotplug{PcieRootPorts: 9}
			s.Disks = []*launcherapi.Disk{containerDisk("root", launcherapi.Bus_BUS_VIRTIO),
				{Name: "scratch", Bus: launcherapi.Bus_BUS_SCSI, Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: gib}}}}
		}),
		// On pc hotplugged disks go onto the root bus: only the SCSI controller is added.
		"hotplug-pc": with(func(s *launcherapi.VMSpec) {
			s.MachineType = "pc"
			s.Hotplug = &launcherapi.Hotplug{}
			s.Disks = []*launcherapi.Disk{containerDisk("root", launcherapi.Bus_BUS_VIRTIO)}
		}),
		"full": with(func(s *launcherapi.VMSpec) {
			s.Cpu = &launcherapi.CPU{Sockets: 1, Cores: 2, Threads: 1}
			s.MemoryBytes = 256 * mib
			s.Firmware = &launcherapi.Firmware{Uuid: "0b9b4f8a-1111-2222-3333-444455556666",
				KernelBoot: &launcherapi.KernelBoot{KernelPath: "/k", InitrdPath: "/i", Cmdline: "console=ttyS0"}}
			s.Disks = []*launcherapi.Disk{containerDisk("root", launcherapi.Bus_BUS_VIRTIO)}
			s.Interfaces = []*launcherapi.Interface{{Name: "default", MacAddress: "52:54:00:12:34:56", TapFdName: "tap0"}}
			s.Devices = &launcherapi.Devices{SerialConsole: true, Vnc: true, MemBalloon: true, Rng: true}
		}),
	}
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			argv, err := Build(spec, testLayout())
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			got := strings.Join(argv, "\n") + "\n"
			path := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run with -update to create): %v", err)
			}
			if got != string(want) {
				t.Errorf("argv differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
}

func TestBuildRejectsBadSpecs(t *testing.T) {
	cases := []struct {
		name  string
		spec  *launcherapi.VMSpec
		field string
		typ   field.ErrorType
	}{
		{"nil spec", nil, "spec", field.ErrorTypeRequired},
		{"no memory", with(func(s *launcherapi.VMSpec) { s.MemoryBytes = 0 }), "spec.memory_bytes", field.ErrorTypeRequired},
		{"memory not MiB", with(func(s *launcherapi.VMSpec) { s.MemoryBytes = 100*mib + 1 }), "spec.memory_bytes", field.ErrorTypeInvalid},
		{"unknown machine", with(func(s *launcherapi.VMSpec) { s.MachineType = "virt" }), "spec.machine_type", field.ErrorTypeNotSupported},
		{"too many vcpus", with(func(s *launcherapi.VMSpec) { s.Cpu = &launcherapi.CPU{Sockets: 16, Cores: 16, Threads: 2} }), "spec.cpu", field.ErrorTypeInvalid},
		{"bad cpu model", with(func(s *launcherapi.VMSpec) { s.Cpu.Model = "max,+vmx" }), "spec.cpu.model", field.ErrorTypeInvalid},
		{"kernel boot without kernel", with(func(s *launcherapi.VMSpec) {
			s.Firmware = &launcherapi.Firmware{KernelBoot: &launcherapi.KernelBoot{InitrdPath: "/i"}}
		}), "spec.firmware.kernel_boot.kernel_path", field.ErrorTypeRequired},
		{"disk without source", with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{{Name: "d", Bus: launcherapi.Bus_BUS_VIRTIO}}
		}), "spec.disks[0].source", field.ErrorTypeRequired},
		{"disk without file", with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{containerDisk("ok", launcherapi.Bus_BUS_VIRTIO),
				{Name: "d", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_File{File: &launcherapi.FileSource{}}}}
		}), "spec.disks[1].file.path", field.ErrorTypeRequired},
		{"file disk as qcow2", with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{{Name: "h", Bus: launcherapi.Bus_BUS_VIRTIO,
				Source: &launcherapi.Disk_File{File: &launcherapi.FileSource{Path: "/host/disk.img", Format: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}}}
		}), "spec.disks[0].file.format", field.ErrorTypeNotSupported},
		{"container disk without base", with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{{Name: "d", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_ContainerDisk{ContainerDisk: &launcherapi.ContainerDiskSource{}}}}
		}), "spec.disks[0].container_disk.base_path", field.ErrorTypeRequired},
		{"unknown bus", with(func(s *launcherapi.VMSpec) {
			d := containerDisk("d", launcherapi.Bus(42))
			s.Disks = []*launcherapi.Disk{d}
		}), "spec.disks[0].bus", field.ErrorTypeNotSupported},
		{"missing bus", with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{containerDisk("d", launcherapi.Bus_BUS_UNSPECIFIED)}
		}), "spec.disks[0].bus", field.ErrorTypeRequired},
		{"virtio cdrom", with(func(s *launcherapi.VMSpec) {
			d := containerDisk("d", launcherapi.Bus_BUS_VIRTIO)
			d.Device = launcherapi.DiskDevice_DISK_DEVICE_CDROM
			s.Disks = []*launcherapi.Disk{d}
		}), "spec.disks[0].bus", field.ErrorTypeInvalid},
		{"duplicate disk", with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{containerDisk("d", launcherapi.Bus_BUS_VIRTIO), containerDisk("d", launcherapi.Bus_BUS_SATA)}
		}), "spec.disks[1].name", field.ErrorTypeDuplicate},
		{"empty disk without capacity", with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{{Name: "e", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{}}}}
		}), "spec.disks[0].empty_disk.capacity_bytes", field.ErrorTypeRequired},
		{"too many sata", with(func(s *launcherapi.VMSpec) {
			for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
				s.Disks = append(s.Disks, containerDisk(n, launcherapi.Bus_BUS_SATA))
			}
		}), "spec.disks", field.ErrorTypeTooMany},
		{"disk from a descriptor at start", with(func(s *launcherapi.VMSpec) {
			s.Disks = []*launcherapi.Disk{{Name: "hp", Bus: launcherapi.Bus_BUS_SCSI, Source: &launcherapi.Disk_Fd{Fd: &launcherapi.FDSource{FdName: "disk-hp"}}}}
		}), "spec.disks[0].fd", field.ErrorTypeInvalid},
		{"too many hotplug ports", with(func(s *launcherapi.VMSpec) {
			s.Hotplug = &launcherapi.Hotplug{PcieRootPorts: MaxHotplugPorts + 1}
		}), "spec.hotplug.pcie_root_ports", field.ErrorTypeTooMany},
		{"root ports on pc", with(func(s *launcherapi.VMSpec) {
			s.MachineType = "pc"
			s.Hotplug = &launcherapi.Hotplug{PcieRootPorts: 2}
		}), "spec.hotplug.pcie_root_ports", field.ErrorTypeInvalid},
		{"bad mac", with(func(s *launcherapi.VMSpec) {
			s.Interfaces = []*launcherapi.Interface{{Name: "n", MacAddress: "zz:00", TapFdName: "tap0"}}
		}), "spec.interfaces[0].mac_address", field.ErrorTypeInvalid},
		{"multicast mac", with(func(s *launcherapi.VMSpec) {
			s.Interfaces = []*launcherapi.Interface{{Name: "n", MacAddress: "01:00:5e:00:00:01", TapFdName: "tap0"}}
		}), "spec.interfaces[0].mac_address", field.ErrorTypeInvalid},
		{"nic model", with(func(s *launcherapi.VMSpec) {
			s.Interfaces = []*launcherapi.Interface{{Name: "n", Model: "e1000", TapFdName: "tap0"}}
		}), "spec.interfaces[0].model", field.ErrorTypeNotSupported},
		{"tap not handed in", with(func(s *launcherapi.VMSpec) {
			s.Interfaces = []*launcherapi.Interface{{Name: "n", TapFdName: "tap9"}}
		}), "spec.interfaces[0].tap_fd_name", field.ErrorTypeNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := Build(tc.spec, testLayout())
			if err == nil {
				t.Fatalf("Build accepted a bad spec: %q", argv)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name field %s", err, tc.field)
			}
			found := false
			for _, e := range Validate(tc.spec, testLayout()) {
				if e.Field == tc.field && e.Type == tc.typ {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s error on %s in %v", tc.typ, tc.field, Validate(tc.spec, testLayout()))
			}
			var agg interface{ Errors() []error }
			if !errors.As(err, &agg) {
				t.Errorf("error %T does not expose the individual field errors", err)
			}
		})
	}
}

// TestFileDisksAreRawOverTheirFileNode: a file used in place (hostDisk, a claim's disk.img), on
// every bus and read-only or not, gets a format node of driver raw over its own file node, so
// QEMU never probes the file's content for a format (and a qcow2 header the guest wrote there
// names no backing file).
func TestFileDisksAreRawOverTheirFileNode(t *testing.T) {
	file := func(name string, bus launcherapi.Bus, ro bool) *launcherapi.Disk {
		return &launcherapi.Disk{Name: name, Bus: bus, ReadOnly: ro,
			Source: &launcherapi.Disk_File{File: &launcherapi.FileSource{Path: "/host/" + name + "/disk.img"}}}
	}
	spec := with(func(s *launcherapi.VMSpec) {
		s.Disks = []*launcherapi.Disk{containerDisk("root", launcherapi.Bus_BUS_VIRTIO),
			file("a", launcherapi.Bus_BUS_VIRTIO, false), file("b", launcherapi.Bus_BUS_SATA, true), file("c", launcherapi.Bus_BUS_SCSI, false)}
	})
	argv, err := Build(spec, testLayout())
	if err != nil {
		t.Fatal(err)
	}
	var blockdevs []map[string]string
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] != "-blockdev" {
			continue
		}
		kv := map[string]string{}
		for _, pair := range strings.Split(argv[i+1], ",") {
			k, v, _ := strings.Cut(pair, "=")
			kv[k] = v
		}
		blockdevs = append(blockdevs, kv)
	}
	nodes := map[string]map[string]string{}
	for _, b := range blockdevs {
		nodes[b["node-name"]] = b
	}
	checked := 0
	for _, b := range blockdevs {
		if b["driver"] != "file" || !strings.HasPrefix(b["filename"], "/host/") {
			continue
		}
		var format map[string]string
		for _, f := range blockdevs {
			if f["file"] == b["node-name"] {
				format = f
			}
		}
		if format == nil || format["driver"] != "raw" || format["backing"] != "" {
			t.Errorf("file node %v has format node %v, want driver=raw over it", b, format)
		}
		checked++
	}
	if checked != 3 {
		t.Fatalf("found %d host files among %v", checked, blockdevs)
	}
	if root := nodes["fmt-0"]; root["driver"] != "qcow2" {
		t.Errorf("the container disk's overlay is %v", root)
	}
}

func TestBuildRejectsASerialLogFDOfATap(t *testing.T) {
	l := testLayout()
	l.SerialLogFD = l.TapFDs["tap1"]
	spec := with(func(s *launcherapi.VMSpec) { s.Devices = &launcherapi.Devices{SerialConsole: true} })
	if argv, err := Build(spec, l); err == nil || !strings.Contains(err.Error(), "layout.serial_log_fd") {
		t.Fatalf("Build(%q) error %v, want the descriptor refused", argv, err)
	}
}

// TestVSOCKUsesTheHandedInDevice: QEMU gets the vhost-vsock device as an inherited descriptor,
// with the guest's context ID; a missing descriptor or a reserved ID is refused.
func TestVSOCKUsesTheHandedInDevice(t *testing.T) {
	l := testLayout()
	l.TapFDs["vhost-vsock"] = 9
	spec := with(func(s *launcherapi.VMSpec) {
		s.Devices = &launcherapi.Devices{Vsock: &launcherapi.VSOCK{GuestCid: 42, VhostFdName: "vhost-vsock"}}
	})
	argv, err := Build(spec, l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(argv, " "), "-device vhost-vsock-pci,id=vsock0,guest-cid=42,vhostfd=9") {
		t.Errorf("no vhost-vsock device in %v", argv)
	}
	for _, tc := range []struct {
		vs   *launcherapi.VSOCK
		want string
	}{
		{&launcherapi.VSOCK{GuestCid: 2, VhostFdName: "vhost-vsock"}, "spec.devices.vsock.guest_cid"},
		{&launcherapi.VSOCK{GuestCid: 3, VhostFdName: "other"}, "spec.devices.vsock.vhost_fd_name"},
	} {
		spec := with(func(s *launcherapi.VMSpec) { s.Devices = &launcherapi.Devices{Vsock: tc.vs} })
		if _, err := Build(spec, l); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error at %s", tc.vs, err, tc.want)
		}
	}
}
