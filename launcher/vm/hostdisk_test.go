package vm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/qvirt/qvirt/e2e/testenv"
	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// TestHostDiskWithAQcow2HeaderStaysRaw attaches a raw hostDisk whose content is a valid qcow2
// header naming a backing file, as a guest could have written into its own disk. QEMU must
// present the file raw: its format node is driver raw with no backing image, and the named
// backing file is never opened.
func TestHostDiskWithAQcow2HeaderStaysRaw(t *testing.T) {
	testenv.RequireQEMU(t)
	g := testenv.RequireGuest(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.raw")
	if err := os.WriteFile(secret, bytes.Repeat([]byte("not-for-the-guest"), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(dir, "host", "disk.img")
	if err := os.MkdirAll(filepath.Dir(disk), 0o750); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", secret, "-F", "raw", disk, "1M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	// The header is real: probed, the file would open the secret as its backing file.
	if out, err := exec.Command("qemu-img", "info", "-U", disk).CombinedOutput(); err != nil || !bytes.Contains(out, []byte("backing file: "+secret)) {
		t.Fatalf("the crafted disk names no backing file (%v):\n%s", err, out)
	}

	spec := guestSpec(g, "hostdisk-raw")
	spec.StartPaused = true // QEMU opens its disks before the guest runs; no need to boot
	spec.Disks = []*launcherapi.Disk{{Name: "host", Bus: launcherapi.Bus_BUS_VIRTIO,
		Source: &launcherapi.Disk_File{File: &launcherapi.FileSource{Path: disk, Format: launcherapi.ImageFormat_IMAGE_FORMAT_RAW}}}}
	v, _ := startVM(t, spec, nil)

	var nodes []struct {
		NodeName         string `json:"node-name"`
		Driver           string `json:"drv"`
		File             string `json:"file"`
		BackingFileDepth int    `json:"backing_file_depth"`
		Image            struct {
			Format          string `json:"format"`
			BackingFilename string `json:"backing-filename"`
		} `json:"image"`
	}
	if err := v.monitor().Execute(within(t, 30*time.Second), "query-named-block-nodes", nil, &nodes); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range nodes {
		if n.File == secret || n.Image.BackingFilename != "" {
			t.Errorf("block node %s (%s) reaches %q, backing %q", n.NodeName, n.Driver, n.File, n.Image.BackingFilename)
		}
		if n.NodeName == "fmt-0" {
			found = true
			if n.Driver != "raw" || n.File != disk || n.BackingFileDepth != 0 || n.Image.Format != "raw" {
				t.Errorf("the hostDisk's format node: %+v", n)
			}
		}
	}
	if !found {
		t.Fatalf("no format node fmt-0 among %+v", nodes)
	}

	// Nor has QEMU the secret open.
	fdDir := filepath.Join("/proc", strconv.FormatInt(v.Status().QemuPid, 10), "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	sawDisk := false
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil {
			continue
		}
		if target == secret {
			t.Errorf("QEMU holds the backing file open as fd %s", e.Name())
		}
		sawDisk = sawDisk || target == disk
	}
	if !sawDisk {
		t.Error("QEMU does not hold the hostDisk open: the check above proves nothing")
	}
}
