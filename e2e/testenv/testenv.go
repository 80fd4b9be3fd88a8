// Package testenv finds what tests that boot real guests need, and skips with the reason when
// this machine lacks it. CI installs everything (make deps guest), so these tests run there.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Guest is the tiny test guest built by `make guest`.
type Guest struct {
	Dir    string
	Kernel string
	Initrd string
	Disk   string // ext4 qcow2 holding hello.txt
}

// Markers the guest prints on its serial console (see hack/guest/README.md).
const (
	MarkerBooted = "qvirt-guest: booted"
	Prompt       = "qvirt# "
)

// RepoRoot is the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// RequireGuest returns the test guest, or skips when it has not been built.
func RequireGuest(t testing.TB) Guest {
	t.Helper()
	if testing.Short() {
		t.Skip("boots the test guest; -short skips it")
	}
	dir := os.Getenv("QVIRT_GUEST_DIR")
	if dir == "" {
		dir = filepath.Join(RepoRoot(t), "_guest")
	}
	g := Guest{Dir: dir, Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img"), Disk: filepath.Join(dir, "disk.qcow2")}
	for _, f := range []string{g.Kernel, g.Initrd, g.Disk} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("test guest not built (run `make guest`): %v", err)
		}
	}
	return g
}

// RequireQEMU skips when QEMU is not installed.
func RequireQEMU(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs QEMU; -short skips it")
	}
	for _, bin := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (run `make deps`): %v", bin, err)
		}
	}
}

// RequireRoot skips when the test cannot create network devices.
func RequireRoot(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root; -short skips it")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create tap devices")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no /dev/net/tun: %v", err)
	}
}
