package ociimages

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/qvirt/qvirt/e2e/testenv"
)

// imageSizes adds up the layers' compressed (as pushed) and uncompressed (as unpacked) sizes.
func imageSizes(t *testing.T, img v1.Image) (compressed, uncompressed int64) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range layers {
		size, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		compressed += size
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		uncompressed += n
		t.Logf("layer %d: %.1f MiB compressed, %.1f MiB uncompressed", i, float64(size)/(1<<20), float64(n)/(1<<20))
	}
	return compressed, uncompressed
}

// inChroot runs argv with root dir, as a container with that image would, and returns its output.
func inChroot(t *testing.T, dir string, stdin string, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir}
	cmd.Dir = "/"
	cmd.Env = []string{DefaultPath}
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) > 8 {
		lines = append(lines[:8], "...")
	}
	t.Logf("chroot %q: exit %v\n%s", argv, err, strings.Join(lines, "\n"))
	return out.String(), err
}

func TestLauncherRunsQEMUFromTheImage(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/usr/bin/qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make apt)")
	}
	binDir := t.TempDir()
	realLauncher := filepath.Join(testenv.RepoRoot(t), "bin", "virt-launcher")
	if _, err := os.Stat(realLauncher); err == nil {
		if err := os.Symlink(realLauncher, filepath.Join(binDir, "virt-launcher")); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("%s is not built; a stand-in takes its place", realLauncher)
		writeFile(t, filepath.Join(binDir, "virt-launcher"), "#!/bin/sh\necho usage\n", 0o755)
	}
	start := time.Now()
	img, err := Launcher(binDir)
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	compressed, uncompressed := imageSizes(t, img)
	t.Logf("launcher image %s built in %v: %.1f MiB compressed, %.1f MiB uncompressed", digest,
		time.Since(start).Round(time.Millisecond), float64(compressed)/(1<<20), float64(uncompressed)/(1<<20))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != "/usr/bin/virt-launcher" {
		t.Fatalf("entrypoint %q", ep)
	}

	root := t.TempDir()
	extract(t, img, root)
	out, err := inChroot(t, root, "", "/usr/bin/qemu-system-x86_64", "--version")
	if err != nil || !strings.Contains(out, "QEMU emulator version") {
		t.Fatalf("qemu-system-x86_64 --version in the image: %v", err)
	}
	out, err = inChroot(t, root, "", "/usr/bin/qemu-img", "--version")
	if err != nil || !strings.Contains(out, "qemu-img version") {
		t.Fatalf("qemu-img --version in the image: %v", err)
	}
	// A q35 machine needs SeaBIOS, and a virtio NIC its iPXE option ROM: QEMU exits at once
	// when it finds neither.
	qmp := `{"execute":"qmp_capabilities"}` + "\n" + `{"execute":"quit"}` + "\n"
	out, err = inChroot(t, root, qmp, "/usr/bin/qemu-system-x86_64", "-machine", "q35", "-accel", "tcg",
		"-nographic", "-nodefaults", "-display", "none", "-S", "-qmp", "stdio",
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0")
	if err != nil || !strings.Contains(out, `"QMP"`) || !strings.Contains(out, `"return"`) {
		t.Fatalf("QEMU did not serve QMP from the image: %v", err)
	}
	out, err = inChroot(t, root, "", "/bin/sh", "-c", "ls /usr/share/seabios/bios-256k.bin && cat /etc/passwd && echo sh-ok")
	if err != nil || !strings.Contains(out, "sh-ok") || !strings.Contains(out, "qemu:x:107") {
		t.Fatalf("busybox sh in the image: %v", err)
	}
	if _, err := os.Stat(realLauncher); err == nil {
		out, err = inChroot(t, root, "", "/usr/bin/virt-launcher", "--help")
		if err != nil || !strings.Contains(out, "Usage") {
			t.Fatalf("virt-launcher --help in the image: %v", err)
		}
	}
}
