package ociimages

import (
	"archive/tar"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/qvirt/qvirt/e2e/testenv"
)

// allEntries merges the headers of every layer, upper ones winning.
func allEntries(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]*tar.Header{}
	for _, l := range layers {
		hdrs, _ := layerEntries(t, l)
		for n, h := range hdrs {
			all[n] = h
		}
	}
	return all
}

func TestComponentImages(t *testing.T) {
	requireRoot(t)
	binDir := t.TempDir()
	pause := buildPause(t)
	// Stand-ins: a dynamically linked binary and static ones.
	for name, src := range map[string]string{
		"virt-api": "/usr/bin/qemu-img", "virt-controller": pause, "virt-handler": pause, "virt-operator": pause,
	} {
		if _, err := os.Stat(src); err != nil {
			t.Skipf("%s is not installed (make apt)", src)
		}
		if err := os.Symlink(src, filepath.Join(binDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range Components {
		img, err := Component(binDir, name)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		bin := "/usr/bin/" + name
		if !slices.Equal(cf.Config.Entrypoint, []string{bin}) {
			t.Fatalf("%s: entrypoint %q", name, cf.Config.Entrypoint)
		}
		hdrs := allEntries(t, img)
		var names []string
		for n := range hdrs {
			names = append(names, n)
		}
		slices.Sort(names)
		c, u := imageSizes(t, img)
		t.Logf("%s: %d entries, %d KiB compressed, %d KiB uncompressed", name, len(names), c>>10, u>>10)
		for path, mode := range map[string]int64{"tmp": 0o1777, "etc/passwd": 0o644, "etc/group": 0o644, bin[1:]: 0o755} {
			if h, ok := hdrs[path]; !ok || h.Mode != mode {
				t.Fatalf("%s: /%s missing or not mode %o: %+v", name, path, mode, h)
			}
		}
		hasLibs := slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "libc.so") })
		hasShell := hdrs["usr/bin/sh"] != nil || hdrs["bin/sh"] != nil
		t.Logf("%s: libc %v, /bin/sh %v", name, hasLibs, hasShell)
		if hasLibs != (name == "virt-api") {
			t.Fatalf("%s: libc in the image is %v; only the dynamically linked stand-in needs it", name, hasLibs)
		}
		if hasShell != (name == "virt-handler") {
			t.Fatalf("%s: a shell in the image is %v; only virt-handler gets busybox", name, hasShell)
		}
		root := t.TempDir()
		extract(t, img, root)
		if out, err := inChroot(t, root, "", bin, "--version"); err != nil || out == "" {
			t.Fatalf("%s does not run in its image: %v", name, err)
		}
		if name == "virt-handler" {
			if out, err := inChroot(t, root, "", "/bin/sh", "-c", "ls / && echo sh-ok"); err != nil || !strings.Contains(out, "sh-ok") {
				t.Fatalf("no working /bin/sh in virt-handler: %v", err)
			}
		}
	}
	if _, err := Component(t.TempDir(), "virt-api"); err == nil {
		t.Fatal("Component built an image without its binary")
	}
}

func TestPauseImage(t *testing.T) {
	requireRoot(t)
	img, err := Pause(filepath.Dir(buildPause(t)))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	hdrs := allEntries(t, img)
	c, _ := imageSizes(t, img)
	t.Logf("pause: entries %v, entrypoint %q, %d KiB compressed", keys(hdrs), cf.Config.Entrypoint, c>>10)
	if !slices.Equal(cf.Config.Entrypoint, []string{"/pause"}) || len(hdrs) != 1 || hdrs["pause"] == nil {
		t.Fatalf("pause image: entrypoint %q, entries %v", cf.Config.Entrypoint, keys(hdrs))
	}
	root := t.TempDir()
	extract(t, img, root)
	if out, err := inChroot(t, root, "", "/pause", "--version"); err != nil || !strings.Contains(out, "qvirt-pause") {
		t.Fatalf("/pause does not run in its image: %v", err)
	}
}

func TestGuestImages(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd.img", "disk.qcow2"} {
		writeFile(t, filepath.Join(dir, f), "content of "+f, 0o600)
	}
	kernel, err := TinyKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	disk, err := TinyDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	for img, files := range map[v1.Image][]string{kernel: {"boot/vmlinuz", "boot/initrd.img"}, disk: {"disk/disk.qcow2"}} {
		hdrs := allEntries(t, img)
		t.Logf("entries %v", keys(hdrs))
		if len(hdrs) != len(files)+1 {
			t.Fatalf("entries %v, want %v and their directory", keys(hdrs), files)
		}
		for _, f := range files {
			h := hdrs[f]
			if h == nil || h.Mode != 0o644 || h.Uid != QEMUUID || h.Gid != QEMUUID || h.Size != int64(len("content of "+filepath.Base(f))) {
				t.Fatalf("%s: %+v, want mode 644 owned by %d", f, h, QEMUUID)
			}
		}
	}
	again, err := TinyDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := disk.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Fatalf("the same disk gave digests %s and %s", d1, d2)
	}
	if _, err := TinyDisk(t.TempDir()); err == nil {
		t.Fatal("TinyDisk built an image without the disk")
	}
}

// buildPause builds hack/pause as the Makefile does and returns the binary.
func buildPause(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "qvirt-pause")
	build := exec.Command("go", "build", "-ldflags", "-s -w", "-o", bin, "./hack/pause")
	build.Dir = testenv.RepoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hack/pause: %v\n%s", err, out)
	}
	return bin
}

func keys(m map[string]*tar.Header) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
