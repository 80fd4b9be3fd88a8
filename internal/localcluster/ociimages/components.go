package ociimages

import (
	"fmt"
	"os"
	"path"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Components are the images of one binary each that Component builds.
var Components = []string{"virt-operator", "virt-api", "virt-controller", "virt-handler"}

// QEMUUID is the user and group QEMU runs as in KubeVirt's launcher, and who owns
// containerDisk files.
const QEMUUID = 107

const (
	passwd = "root:x:0:0:root:/root:/bin/sh\n" +
		"qemu:x:107:107:qemu:/:/usr/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group = "root:x:0:\nqemu:x:107:\nnobody:x:65534:\n"
)

// busyboxApplets are linked to /bin/busybox so that `kubectl exec POD -- sh` and a look around work.
var busyboxApplets = []string{"sh", "ls", "cat", "ps", "echo", "env", "grep", "head", "tail", "sleep"}

// baseFiles are what every component image has beside its binary.
func baseFiles() []File {
	return []File{
		{Path: "/etc/passwd", Content: []byte(passwd), Mode: 0o644},
		{Path: "/etc/group", Content: []byte(group), Mode: 0o644},
		Dir("/tmp", 0o777|os.ModeSticky),
		Dir("/root", 0o700),
	}
}

// Component is the image of bin/<name>: the binary at /usr/bin/<name> as the entrypoint, with the
// libraries it needs when dynamically linked. virt-handler also gets busybox, so that `kubectl exec`
// into the node agent finds a shell.
func Component(binDir, name string) (v1.Image, error) {
	base := baseFiles()
	if name == "virt-handler" {
		bb, err := busyboxFiles()
		if err != nil {
			return nil, err
		}
		base = append(base, bb...)
	}
	bin, err := binaryFiles(filepath.Join(binDir, name), "/usr/bin/"+name)
	if err != nil {
		return nil, err
	}
	return Build(Spec{
		Layers:     [][]File{base, bin},
		Entrypoint: []string{"/usr/bin/" + name},
		Labels:     map[string]string{"org.opencontainers.image.title": name},
	})
}

// Launcher is the virt-launcher image: QEMU with its firmware, modules and libraries, and busybox
// in one layer that rarely changes, and /usr/bin/virt-launcher above it.
func Launcher(binDir string) (v1.Image, error) {
	qemu, err := qemuFiles()
	if err != nil {
		return nil, err
	}
	bb, err := busyboxFiles()
	if err != nil {
		return nil, err
	}
	bin, err := binaryFiles(filepath.Join(binDir, "virt-launcher"), "/usr/bin/virt-launcher")
	if err != nil {
		return nil, err
	}
	return Build(Spec{
		Layers:     [][]File{append(append(baseFiles(), bb...), qemu...), bin},
		Entrypoint: []string{"/usr/bin/virt-launcher"},
		Labels:     map[string]string{"org.opencontainers.image.title": "virt-launcher"},
	})
}

// Pause is the pod sandbox image: bin/qvirt-pause at /pause.
func Pause(binDir string) (v1.Image, error) {
	bin, err := binaryFiles(filepath.Join(binDir, "qvirt-pause"), "/pause")
	if err != nil {
		return nil, err
	}
	return Build(Spec{
		Layers:     [][]File{bin},
		Entrypoint: []string{"/pause"},
		Labels:     map[string]string{"org.opencontainers.image.title": "pause"},
	})
}

// TinyKernel is the test guest's kernelBoot image: /boot/vmlinuz and /boot/initrd.img from guestDir.
func TinyKernel(guestDir string) (v1.Image, error) {
	return Files(guestFile(guestDir, "vmlinuz", "/boot/vmlinuz"), guestFile(guestDir, "initrd.img", "/boot/initrd.img"))
}

// TinyDisk is the test guest's containerDisk image: /disk/disk.qcow2 from guestDir.
func TinyDisk(guestDir string) (v1.Image, error) {
	return Files(guestFile(guestDir, "disk.qcow2", "/disk/disk.qcow2"))
}

// guestFile is owned by QEMU's user, as KubeVirt's containerDisks are.
func guestFile(dir, name, inImage string) File {
	return File{Path: inImage, Source: filepath.Join(dir, name), Mode: 0o644, UID: QEMUUID, GID: QEMUUID}
}

// binaryFiles puts the host binary src at inImage, with the libraries it loads.
func binaryFiles(src, inImage string) ([]File, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("%s is not an executable file", src)
	}
	t := newHostTree()
	if err := t.addLibraries(src); err != nil {
		return nil, err
	}
	return append(t.Files(), File{Path: inImage, Source: src, Mode: 0o755}), nil
}

// busyboxFiles is the host's static /bin/busybox with links for busyboxApplets beside it.
func busyboxFiles() ([]File, error) { return busyboxWith(busyboxApplets) }

// busyboxWith is the host's static /bin/busybox with applet links beside it, in the image's /bin.
func busyboxWith(applets []string) ([]File, error) {
	t := newHostTree()
	if err := t.Add("/bin/busybox"); err != nil {
		return nil, fmt.Errorf("busybox (Debian package busybox-static): %w", err)
	}
	bb := t.Resolve("/bin/busybox")
	binDir := t.Resolve("/bin")
	files := t.Files()
	for _, applet := range applets {
		target := bb
		if path.Dir(bb) == binDir {
			target = path.Base(bb)
		}
		files = append(files, Symlink(path.Join(binDir, applet), target))
	}
	return files, nil
}

// launcherPackages are the Debian packages whose data QEMU reads at run time: firmware, option
// ROMs, keymaps and loadable modules.
var launcherPackages = []Package{
	{Name: "qemu-system-x86"},
	{Name: "qemu-system-data"},
	{Name: "qemu-system-common", Optional: true},
	{Name: "qemu-utils"},
	{Name: "qemu-block-extra", Optional: true},
	{Name: "seabios"},
	{Name: "ipxe-qemu", Optional: true},
}

// qemuFiles are qemu-system-x86_64 and qemu-img, the packages' files under /usr/share and
// /usr/lib, and the libraries of every program and module among them. The merged-/usr links of
// the host's root come along so that paths through /lib64 and /bin resolve as on the host.
func qemuFiles() ([]File, error) {
	t := newHostTree()
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if st, err := os.Lstat(p); err == nil && st.Mode()&os.ModeSymlink != 0 {
			if err := t.Add(p); err != nil {
				return nil, err
			}
		}
	}
	if err := t.Add("/usr/bin/qemu-system-x86_64", "/usr/bin/qemu-img"); err != nil {
		return nil, fmt.Errorf("QEMU (Debian packages qemu-system-x86, qemu-utils): %w", err)
	}
	for _, pkg := range launcherPackages {
		files, err := packageFiles(pkg, "/usr/share/", "/usr/lib/")
		if err != nil {
			return nil, err
		}
		if err := t.Add(files...); err != nil {
			return nil, err
		}
	}
	return t.Files(), nil
}
