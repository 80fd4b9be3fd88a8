package handler

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/node/launcherspec"
)

const testPID = 4242

// fakeLauncher lays out /proc/<pid>/root of a launcher under a temporary proc root, as the
// compute container sees its files: Debian's /var/run -> /run, and one directory per image
// volume. files maps paths in the container to their content; a value "-> target" makes a link.
func fakeLauncher(t *testing.T, files map[string]string) string {
	t.Helper()
	proc := t.TempDir()
	root := filepath.Join(proc, "4242", "root")
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "var"), 0o755)
	// Absolute, as in the image: it must resolve in the container's root, not the test's.
	if err := os.Symlink("/run", filepath.Join(root, "var", "run")); err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		host := filepath.Join(root, strings.Replace(p, "/var/run/", "/run/", 1))
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasPrefix(content, "-> "):
			err = os.Symlink(strings.TrimPrefix(content, "-> "), host)
		case content == "/":
			err = os.MkdirAll(host, 0o755)
		default:
			err = os.WriteFile(host, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

const (
	diskMount   = "/var/run/kubevirt/container-disks/rootdisk"
	kernelMount = "/var/run/kubevirt/kernel-boot"
)

// imagePod mounts disk:1 and kernel:1 the way virt-controller renders them.
func imagePod() *corev1.Pod {
	image := func(ref string) corev1.VolumeSource {
		return corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: ref}}
	}
	return &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: computeContainer, VolumeMounts: []corev1.VolumeMount{
			{Name: "vm-dir", MountPath: "/var/run/qvirt/vm"},
			{Name: "container-disk-rootdisk", MountPath: diskMount + "/", ReadOnly: true},
			{Name: "kernel-boot", MountPath: kernelMount, ReadOnly: true},
		}}},
		Volumes: []corev1.Volume{
			{Name: "vm-dir", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "container-disk-rootdisk", VolumeSource: image("disk:1")},
			{Name: "kernel-boot", VolumeSource: image("kernel:1")},
		},
	}}
}

func TestPodImagesFindFilesInTheLauncher(t *testing.T) {
	proc := fakeLauncher(t, map[string]string{
		diskMount + "/disk/fedora.qcow2": "QFI\xfb disk",
		kernelMount + "/boot/vmlinuz":    "kernel",
		kernelMount + "/boot/initrd.img": "initrd",
	})
	if !hasImageVolumes(imagePod()) {
		t.Fatal("image volumes not seen")
	}
	r := newPodImages(imagePod(), testPID, proc)

	got, err := r.File("disk:1", "")
	if want := diskMount + "/disk/fedora.qcow2"; err != nil || got != want {
		t.Fatalf("File(disk:1, \"\") = %q, %v; want %s", got, err, want)
	}
	got, err = r.File("kernel:1", "boot/../boot//vmlinuz")
	if want := kernelMount + "/boot/vmlinuz"; err != nil || got != want {
		t.Fatalf("File(kernel:1, vmlinuz) = %q, %v; want %s", got, err, want)
	}
	f, err := r.Open(got)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "kernel" {
		t.Errorf("Open read %q", b)
	}
	if _, err := r.Open("/etc/passwd"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open outside the images: %v", err)
	}
}

func TestPodImagesRefuse(t *testing.T) {
	proc := fakeLauncher(t, map[string]string{
		kernelMount + "/boot/vmlinuz-6.1": "kernel",
		kernelMount + "/boot/vmlinuz":     "-> vmlinuz-6.1",
		kernelMount + "/boot/passwd":      "-> /etc/passwd",
		kernelMount + "/current":          "-> boot",
		kernelMount + "/lib":              "/",
		diskMount + "/disk/disk.qcow2":    "-> /etc/shadow",
	})
	r := newPodImages(imagePod(), testPID, proc)
	for _, tc := range []struct {
		image, path string
		want        []string
		is          error
	}{
		{image: "kernel:1", path: "/boot/vmlinuz", want: []string{"refused", "/boot/vmlinuz is a symbolic link (to vmlinuz-6.1)"}},
		{image: "kernel:1", path: "/boot/passwd", want: []string{"refused", "symbolic link (to /etc/passwd)"}},
		{image: "kernel:1", path: "/current/vmlinuz-6.1", want: []string{"refused", "/current is a symbolic link"}},
		{image: "disk:1", path: "", want: []string{"refused /disk/disk.qcow2", "symbolic link"}},
		{image: "kernel:1", path: "/lib", want: []string{"not a regular file"}},
		{image: "kernel:1", path: "/", want: []string{"root"}},
		{image: "kernel:1", path: "/boot/missing", want: []string{"/boot/missing: no such file in image kernel:1"}, is: fs.ErrNotExist},
		{image: "kernel:1", path: "/boot/vmlinuz-6.1/x", want: []string{"not a directory"}, is: fs.ErrNotExist},
		// Cleaned to /etc/passwd inside the image, which has none.
		{image: "kernel:1", path: "../../../../../etc/passwd", want: []string{"no such file"}, is: fs.ErrNotExist},
		{image: "other:1", path: "/x", want: []string{"not an image volume of the launcher pod"}, is: launcherspec.ErrImageNotFound},
	} {
		got, err := r.File(tc.image, tc.path)
		if err == nil {
			t.Errorf("File(%s, %q) = %q, want an error", tc.image, tc.path, got)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("File(%s, %q): error %q lacks %q", tc.image, tc.path, err, w)
			}
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("File(%s, %q): error %v is not %v", tc.image, tc.path, err, tc.is)
		}
	}
}

func TestPodImagesWantOneFileUnderDisk(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no disk directory", map[string]string{diskMount + "/other/disk.qcow2": "x"}, "has no /disk directory"},
		{"disk is a file", map[string]string{diskMount + "/disk": "x"}, "has no /disk directory"},
		{"empty disk directory", map[string]string{diskMount + "/disk/sub": "/"}, "no file in /disk"},
		{"several files", map[string]string{diskMount + "/disk/a.qcow2": "a", diskMount + "/disk/b.raw": "b"}, "2 files in /disk (a.qcow2, b.raw)"},
		{"disk directory is a link", map[string]string{diskMount + "/real/a.qcow2": "a", diskMount + "/disk": "-> real"}, "refused /disk in image disk:1: /disk is a symbolic link (to real)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPodImages(imagePod(), testPID, fakeLauncher(t, tc.files))
			_, err := r.File("disk:1", "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// The VMI's fields are named when the launcher pod lacks a file.
func TestBuildNamesTheFieldOfAMissingImageFile(t *testing.T) {
	proc := fakeLauncher(t, map[string]string{
		diskMount + "/disk/disk.qcow2":   "QFI\xfb disk",
		kernelMount + "/boot/vmlinuz":    "kernel",
		kernelMount + "/boot/initrd.img": "initrd",
	})
	mem := resource.MustParse("128Mi")
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{
		Domain: v1.DomainSpec{
			Memory:   &v1.Memory{Guest: &mem},
			Firmware: &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "kernel:1", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"}}},
			Devices:  v1.Devices{Disks: []v1.Disk{{Name: "rootdisk"}}},
		},
		Volumes: []v1.Volume{{Name: "rootdisk", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk:1"}}}},
	}}
	env := launcherspec.Env{Images: newPodImages(imagePod(), testPID, proc)}
	spec, err := launcherspec.Build(vmi, env)
	if err != nil {
		t.Fatal(err)
	}
	if cd := spec.Disks[0].GetContainerDisk(); cd.GetBasePath() != diskMount+"/disk/disk.qcow2" || cd.GetBaseFormat().String() != "IMAGE_FORMAT_QCOW2" {
		t.Errorf("container disk %v", cd)
	}
	if kb := spec.Firmware.GetKernelBoot(); kb.GetKernelPath() != kernelMount+"/boot/vmlinuz" || kb.GetInitrdPath() != kernelMount+"/boot/initrd.img" {
		t.Errorf("kernel boot %v", kb)
	}

	vmi.Spec.Volumes[0].ContainerDisk.Path = "/disk/other.qcow2"
	vmi.Spec.Domain.Firmware.KernelBoot.Container.KernelPath = "/boot/bzImage"
	_, err = launcherspec.Build(vmi, env)
	for _, want := range []string{"spec.volumes[0].containerDisk.path", "/disk/other.qcow2: no such file in image disk:1", "spec.domain.firmware.kernelBoot.container.kernelPath", "/boot/bzImage: no such file in image kernel:1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

type storeImages struct{}

func (storeImages) File(string, string) (string, error) { return "/store/file", nil }

func TestImagesForPicksTheLaunchersSource(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "vmi-uid"}}
	vmi.Spec.Volumes = []v1.Volume{{Name: "rootdisk", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk:1"}}}}
	pod := func(name, node string, phase corev1.PodPhase, volumes bool) *corev1.Pod {
		p := imagePod()
		if !volumes {
			p = &corev1.Pod{}
		}
		p.Name, p.Namespace, p.Labels = name, "ns", map[string]string{v1.AppLabel: v1.VirtLauncherAppLabelValue, v1.CreatedByLabel: "vmi-uid"}
		p.Spec.NodeName, p.Status.Phase = node, phase
		return p
	}
	scheme := runtime.NewScheme()
	clientgoscheme.AddToScheme(scheme)
	lc := &launcherConn{pid: testPID}
	for _, tc := range []struct {
		name    string
		pods    []client.Object
		noImage bool
		want    string // "pod", "none" or "error"
	}{
		{"image volumes", []client.Object{pod("old", "node-1", corev1.PodFailed, false), pod("other-node", "node-2", corev1.PodRunning, false), pod("live", "node-1", corev1.PodRunning, true)}, false, "pod"},
		{"pod without image volumes", []client.Object{pod("live", "node-1", corev1.PodRunning, false)}, false, "none"},
		{"no pod yet", []client.Object{pod("other-node", "node-2", corev1.PodRunning, true)}, false, "error"},
		{"no images to find", nil, true, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.pods...).Build()
			h := New(c, Options{NodeName: "node-1"})
			vmi := vmi.DeepCopy()
			if tc.noImage {
				vmi.Spec.Volumes = nil
			}
			pod, err := h.volumePod(context.Background(), vmi)
			var r launcherspec.ImageResolver
			if err == nil {
				r = imagesIn(vmi, pod, lc)
			}
			got := "error"
			switch {
			case err != nil:
			case r == nil:
				got = "none"
			default:
				if _, ok := r.(*podImages); ok {
					got = "pod"
				}
			}
			if got != tc.want {
				t.Errorf("got %s (%T, %v), want %s", got, r, err, tc.want)
			}
			if pi, ok := r.(*podImages); ok && (pi.pid != testPID || pi.mounts["disk:1"] != diskMount) {
				t.Errorf("resolver %+v", pi)
			}
		})
	}
}
