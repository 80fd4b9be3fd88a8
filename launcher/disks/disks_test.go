package disks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/go-logr/logr"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
	"github.com/qvirt/qvirt/launcher/qemuargs"
)

func requireQemuImg(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs qemu-img; -short skips it")
	}
	for _, bin := range []string{"qemu-img", "qemu-io"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (make deps installs qemu-utils): %v", bin, err)
		}
	}
}

func TestNoCloudISOKeepsNamesAndLabel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seed.iso")
	src := &launcherapi.CloudInitNoCloudSource{UserData: "#!/bin/sh\necho hello\n", MetaData: "local-hostname: vm1\n", NetworkData: "version: 2\n"}
	if err := WriteNoCloudISO(path, src); err != nil {
		t.Fatal(err)
	}
	if got := strings.Trim(openISO(t, path).Label(), " \x00"); got != NoCloudLabel {
		t.Errorf("volume label %q, want %q", got, NoCloudLabel)
	}
	files := isoFiles(t, path, "user-data", "meta-data", "network-config")
	for name, want := range map[string]string{"user-data": src.UserData, "meta-data": src.MetaData, "network-config": src.NetworkData} {
		if files[name] != want {
			t.Errorf("%s = %q, want %q", name, files[name], want)
		}
	}
	if out, err := exec.Command("blkid", "-o", "value", "-s", "LABEL", path).Output(); err == nil {
		if strings.TrimSpace(string(out)) != NoCloudLabel {
			t.Errorf("blkid label %q", out)
		}
	}
}

func TestOverlayLeavesBaseUnchanged(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "write -P 0x11 0 64k", base).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	before := sum(t, base)

	l := qemuargs.NewLayout(filepath.Join(dir, "vm"))
	spec := &launcherapi.VMSpec{Disks: []*launcherapi.Disk{
		{Name: "root", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_ContainerDisk{ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: base, BaseFormat: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}},
		{Name: "scratch", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: 8 << 20}}},
		{Name: "seed", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_CloudInitNoCloud{CloudInitNoCloud: &launcherapi.CloudInitNoCloudSource{UserData: "#!/bin/sh\n"}}},
		{Name: "host", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_File{File: &launcherapi.FileSource{Path: filepath.Join(dir, "host.img"), CreateBytes: 4 << 20}}},
	}}
	if err := Prepare(context.Background(), spec, l, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	ov := l.DiskImage(spec.Disks[0]).Path
	// The overlay reads the base's data, and takes writes without touching the base.
	if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "read -P 0x11 0 64k", "-c", "write -P 0x22 0 4k", "-c", "read -P 0x22 0 4k", ov).CombinedOutput(); err != nil || bytes.Contains(out, []byte("Pattern verification failed")) {
		t.Fatalf("overlay read/write: %v: %s", err, out)
	}
	if after := sum(t, base); after != before {
		t.Error("base image changed after writing through the overlay")
	}
	if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "read -P 0x11 0 4k", base).CombinedOutput(); err != nil || bytes.Contains(out, []byte("Pattern verification failed")) {
		t.Errorf("base content changed: %v: %s", err, out)
	}
	info, err := exec.Command("qemu-img", "info", l.DiskImage(spec.Disks[1]).Path).Output()
	if err != nil || !bytes.Contains(info, []byte("virtual size: 8 MiB")) {
		t.Errorf("empty disk: %v: %s", err, info)
	}
	if st, err := os.Stat(filepath.Join(dir, "host.img")); err != nil || st.Size() != 4<<20 {
		t.Errorf("host disk not created with its size: %v %v", st, err)
	}
}

// With an ephemeral directory (a launcher pod's emptyDir) the overlay goes there, over a base
// image that stays read-only; the other generated disks stay in the VM directory.
func TestOverlayInEphemeralDir(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "image", "disk.qcow2")
	os.MkdirAll(filepath.Dir(base), 0o755)
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// As in an image volume: nothing under the image may be written.
	os.Chmod(base, 0o444)
	os.Chmod(filepath.Dir(base), 0o555)
	t.Cleanup(func() { os.Chmod(filepath.Dir(base), 0o755) })

	l := qemuargs.NewLayout(filepath.Join(dir, "vm"))
	l.EphemeralDir = filepath.Join(dir, "ephemeral")
	spec := &launcherapi.VMSpec{Disks: []*launcherapi.Disk{
		{Name: "root", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_ContainerDisk{ContainerDisk: &launcherapi.ContainerDiskSource{BasePath: base, BaseFormat: launcherapi.ImageFormat_IMAGE_FORMAT_QCOW2}}},
		{Name: "scratch", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: 1 << 20}}},
	}}
	if err := Prepare(context.Background(), spec, l, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	ov := l.DiskImage(spec.Disks[0]).Path
	if want := filepath.Join(dir, "ephemeral", "root.qcow2"); ov != want {
		t.Fatalf("overlay at %s, want %s", ov, want)
	}
	info, err := exec.Command("qemu-img", "info", ov).Output()
	if err != nil || !bytes.Contains(info, []byte("backing file: "+base)) {
		t.Errorf("overlay: %v: %s", err, info)
	}
	if _, err := os.Stat(filepath.Join(dir, "ephemeral", "scratch.qcow2")); err != nil {
		t.Errorf("empty disk not in the pod's ephemeral space: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(base)); len(ents) != 1 {
		t.Errorf("image directory holds %d files, want only the base", len(ents))
	}
}

func TestPrepareUndoesOnFailure(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	l := qemuargs.NewLayout(filepath.Join(dir, "vm"))
	spec := &launcherapi.VMSpec{Disks: []*launcherapi.Disk{
		{Name: "scratch", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_EmptyDisk{EmptyDisk: &launcherapi.EmptyDiskSource{CapacityBytes: 1 << 20}}},
		{Name: "missing", Bus: launcherapi.Bus_BUS_VIRTIO, Source: &launcherapi.Disk_File{File: &launcherapi.FileSource{Path: filepath.Join(dir, "nope.img")}}},
	}}
	err := Prepare(context.Background(), spec, l, logr.Discard())
	if err == nil || !strings.Contains(err.Error(), "spec.disks[1]") {
		t.Fatalf("want an error naming spec.disks[1], got %v", err)
	}
	if _, err := os.Stat(l.DiskImage(spec.Disks[0]).Path); !os.IsNotExist(err) {
		t.Errorf("blank disk left behind after failure: %v", err)
	}
}

func sum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestNoCloudISOReadsSecretData: user and network data from secret volumes (KubeVirt's keys,
// userdata or userData, networkdata or networkData) take the place of inline data; a secret
// without the key is an error, not an empty seed.
func TestNoCloudISOReadsSecretData(t *testing.T) {
	user, network := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(user, "userData"), []byte("#!/bin/sh\necho from-secret\n"), 0o400)
	os.WriteFile(filepath.Join(network, "networkdata"), []byte("version: 2\n"), 0o400)
	path := filepath.Join(t.TempDir(), "seed.iso")
	src := &launcherapi.CloudInitNoCloudSource{MetaData: "{}", UserDataDir: user, NetworkDataDir: network}
	if err := WriteNoCloudISO(path, src); err != nil {
		t.Fatal(err)
	}
	got := isoFiles(t, path, "user-data", "network-config")
	if got["user-data"] != "#!/bin/sh\necho from-secret\n" || got["network-config"] != "version: 2\n" {
		t.Errorf("seed files %q", got)
	}
	src.UserDataDir = t.TempDir()
	if err := WriteNoCloudISO(path, src); err == nil || !strings.Contains(err.Error(), "has no userdata or userData key") {
		t.Errorf("a secret without user data: %v", err)
	}
}

// openISO opens the ISO9660 filesystem of the image at path, closed when the test ends.
func openISO(t *testing.T, path string) filesystem.FileSystem {
	t.Helper()
	img, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	img.LogicalBlocksize = 2048
	fs, err := img.GetFilesystem(0)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// isoFiles reads the named files of the ISO9660 image at path.
func isoFiles(t *testing.T, path string, names ...string) map[string]string {
	t.Helper()
	fs := openISO(t, path)
	out := map[string]string{}
	for _, name := range names {
		f, err := fs.OpenFile("/"+name, os.O_RDONLY)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}
