package launcherspec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// images maps "image:path" to files.
type images map[string]string

func (m images) File(image, path string) (string, error) {
	if f, ok := m[image+":"+path]; ok {
		return f, nil
	}
	return "", fmt.Errorf("%w: %s", ErrImageNotFound, image)
}

func TestBuildFromAKubeVirtVMI(t *testing.T) {
	dir := t.TempDir()
	qcow := filepath.Join(dir, "disk.qcow2")
	os.WriteFile(qcow, []byte("QFI\xfb\x00\x00\x00\x03"), 0o644)
	mem := resource.MustParse("256Mi")
	boot := uint(1)
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "u1"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				CPU:      &v1.CPU{Sockets: 1, Cores: 2, Threads: 1},
				Memory:   &v1.Memory{Guest: &mem},
				Machine:  &v1.Machine{Type: "pc-q35-rhel9.2.0"},
				Firmware: &v1.Firmware{UUID: "abc", KernelBoot: &v1.KernelBoot{KernelArgs: "console=ttyS0", Container: &v1.KernelBootContainer{Image: "k:1", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"}}},
				Devices: v1.Devices{
					Disks: []v1.Disk{
						{Name: "root", BootOrder: &boot, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}},
						{Name: "ci", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: "sata"}}},
						{Name: "scratch", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "scsi"}}},
					},
					Interfaces:           []v1.Interface{{Name: "default"}},
					AutoattachMemBalloon: new(bool),
				},
			},
			Volumes: []v1.Volume{
				{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "d:1"}}},
				{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataBase64: "IyEvYmluL3NoCg=="}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}},
			},
		},
	}
	env := Env{UseEmulation: true, Images: images{"d:1:": qcow, "k:1:/boot/vmlinuz": "/k", "k:1:/boot/initrd.img": "/i"},
		NICs: map[string]NIC{"default": {TapFDName: "tap-default", MAC: "02:00:00:00:00:01"}}}
	spec, err := Build(vmi, env)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Accel != launcherapi.Accel_ACCEL_TCG || spec.MachineType != "q35" || spec.MemoryBytes != 256<<20 || spec.Cpu.Cores != 2 {
		t.Errorf("basics: %v", spec)
	}
	if kb := spec.Firmware.KernelBoot; kb.KernelPath != "/k" || kb.InitrdPath != "/i" || kb.Cmdline != "console=ttyS0" || spec.Firmware.Uuid != "abc" {
		t.Errorf("kernel boot: %v", spec.Firmware)
	}
	if len(spec.Disks) != 3 {
		t.Fatalf("disks: %v", spec.Disks)
	}
	if cd := spec.Disks[0].GetContainerDisk(); cd == nil || cd.BasePath != qcow || cd.BaseFormat != launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2 || spec.Disks[0].BootOrder != 1 {
		t.Errorf("container disk: %v", spec.Disks[0])
	}
	if d := spec.Disks[1]; d.Device != launcherapi.DiskDevice_DISK_DEVICE_CDROM || d.Bus != launcherapi.Bus_BUS_SATA || d.GetCloudInitNoCloud().GetUserData() != "#!/bin/sh\n" ||
		d.GetCloudInitNoCloud().GetMetaData() != "{\"instance-id\":\"vm.ns\",\"local-hostname\":\"vm\"}\n" {
		t.Errorf("cloud-init cdrom: %v", d)
	}
	if d := spec.Disks[2]; d.Bus != launcherapi.Bus_BUS_SCSI || d.GetEmptyDisk().GetCapacityBytes() != 1<<30 {
		t.Errorf("empty disk: %v", d)
	}
	if in := spec.Interfaces[0]; in.MacAddress != "02:00:00:00:00:01" || in.TapFdName != "tap-default" {
		t.Errorf("interface: %v", in)
	}
	if d := spec.Devices; !d.SerialConsole || !d.Vnc || d.MemBalloon || d.Rng || !spec.Acpi {
		t.Errorf("devices: %v acpi=%v", d, spec.Acpi)
	}
}

func TestMemoryRoundsUpToMiB(t *testing.T) {
	mem := resource.MustParse("1G")
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}}}}
	spec, err := Build(vmi, Env{})
	if err != nil {
		t.Fatal(err)
	}
	if spec.MemoryBytes != 954<<20 {
		t.Errorf("1G became %d bytes, want 954 MiB", spec.MemoryBytes)
	}
}

func TestBuildNamesWhatItCannotHonour(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{
		Domain: v1.DomainSpec{Devices: v1.Devices{
			Disks:      []v1.Disk{{Name: "root"}, {Name: "orphan"}},
			Interfaces: []v1.Interface{{Name: "default"}},
		}},
		Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "missing:1"}}}},
	}}
	_, err := Build(vmi, Env{Images: images{}})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"spec.domain.memory.guest", "spec.volumes[0].containerDisk.image", "image not found", "spec.domain.devices.disks[1].name", "spec.domain.devices.interfaces[0].name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// containerImages names files as the launcher's container sees them; only Open reaches them.
type containerImages struct{ host string }

func (c containerImages) File(image, path string) (string, error) {
	if path == "/missing" {
		return "", fmt.Errorf("%s in image %s: %w", path, image, os.ErrNotExist)
	}
	return "/var/run/kubevirt/container-disks/root/disk/disk.qcow2", nil
}

func (c containerImages) Open(path string) (*os.File, error) {
	if path != "/var/run/kubevirt/container-disks/root/disk/disk.qcow2" {
		return nil, os.ErrNotExist
	}
	return os.Open(c.host)
}

func TestBuildReadsFormatThroughTheResolver(t *testing.T) {
	qcow := filepath.Join(t.TempDir(), "disk.qcow2")
	os.WriteFile(qcow, []byte("QFI\xfb\x00\x00\x00\x03"), 0o644)
	mem := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{
		Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "ci"}, {Name: "root"}}}},
		Volumes: []v1.Volume{
			{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#!/bin/sh"}}},
			{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "d:1"}}},
		},
	}}
	spec, err := Build(vmi, Env{Images: containerImages{host: qcow}})
	if err != nil {
		t.Fatal(err)
	}
	cd := spec.Disks[1].GetContainerDisk()
	if cd.GetBasePath() != "/var/run/kubevirt/container-disks/root/disk/disk.qcow2" || cd.GetBaseFormat() != launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2 {
		t.Errorf("container disk %v", cd)
	}

	vmi.Spec.Volumes[1].ContainerDisk.Path = "/missing"
	_, err = Build(vmi, Env{Images: containerImages{host: qcow}})
	if err == nil || !strings.Contains(err.Error(), "spec.volumes[1].containerDisk.path") {
		t.Errorf("want an error naming spec.volumes[1].containerDisk.path, got %v", err)
	}
}

func TestBuildWithoutImageVolumes(t *testing.T) {
	mem := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{
		Domain:  v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
		Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/x/y:1"}}}},
	}}
	_, err := Build(vmi, Env{})
	if err == nil || !strings.Contains(err.Error(), "mounts no image volume") {
		t.Fatalf("want a clear error, got %v", err)
	}
}

func TestStartStrategyPausedStartsThePausedGuest(t *testing.T) {
	mem := resource.MustParse("128Mi")
	paused := v1.StartStrategyPaused
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}}}}
	spec, err := Build(vmi, Env{})
	if err != nil || spec.StartPaused {
		t.Fatalf("without a start strategy: start_paused %v, %v", spec.GetStartPaused(), err)
	}
	vmi.Spec.StartStrategy = &paused
	if spec, err = Build(vmi, Env{}); err != nil || !spec.StartPaused {
		t.Fatalf("startStrategy Paused: start_paused %v, %v", spec.GetStartPaused(), err)
	}
}

// TestGuestWrittenFilesAreRaw: a hostDisk and a claim's disk.img are raw whatever they hold. The
// guest writes them, and a qcow2 header it wrote must not decide their format at the next boot.
func TestGuestWrittenFilesAreRaw(t *testing.T) {
	dir := t.TempDir()
	host, claim := filepath.Join(dir, "host.img"), filepath.Join(dir, "claim.img")
	for _, p := range []string{host, claim} {
		if err := os.WriteFile(p, []byte("QFI\xfb\x00\x00\x00\x03"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mem := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{
		Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "host"}, {Name: "claim"}}}},
		Volumes: []v1.Volume{
			{Name: "host", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: host, Type: "Disk"}}},
			{Name: "claim", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}},
		},
	}}
	spec, err := Build(vmi, Env{Claims: map[string]ClaimDisk{"": {Path: claim}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{host, claim} {
		f := spec.Disks[i].GetFile()
		if f.GetPath() != want || f.GetFormat() != launcherapi.ImageFormat_IMAGE_FORMAT_RAW {
			t.Errorf("disk %d: %v, want %s raw", i, f, want)
		}
	}
}
