package handler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/node/launcherspec"
	"github.com/qvirt/qvirt/node/safepath"
)

// computeContainer is the launcher pod's container that runs virt-launcher and QEMU.
const computeContainer = "compute"

// diskDir is where a containerDisk image keeps its disk (KubeVirt's convention).
const diskDir = "disk"

// podImages finds containerDisk and kernelBoot files in a launcher pod that mounts its images as
// image volumes. It returns the paths the compute container sees, since QEMU opens them there;
// the node agent itself reads them through the launcher's /proc/<pid>/root.
type podImages struct {
	// procRoot is /proc; tests point it at a fake one.
	procRoot string
	// pid of the launcher, whose root is the compute container's.
	pid int
	// mounts maps an image reference to its mount path in the compute container.
	mounts map[string]string
}

// hasImageVolumes tells whether a launcher pod mounts any image (containerDisk, kernelBoot).
func hasImageVolumes(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			return true
		}
	}
	return false
}

func newPodImages(pod *corev1.Pod, pid int, procRoot string) *podImages {
	refs := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			refs[v.Name] = v.Image.Reference
		}
	}
	r := &podImages{procRoot: procRoot, pid: pid, mounts: map[string]string{}}
	for _, c := range pod.Spec.Containers {
		if c.Name != computeContainer {
			continue
		}
		for _, m := range c.VolumeMounts {
			// Two volumes of one image hold the same files: the first will do.
			if ref, ok := refs[m.Name]; ok && r.mounts[ref] == "" {
				r.mounts[ref] = path.Clean(m.MountPath)
			}
		}
	}
	return r
}

// File returns the compute container's path of p in image. An empty p is the single file under
// /disk/, as KubeVirt finds a containerDisk's disk.
func (r *podImages) File(image, p string) (string, error) {
	mount, ok := r.mounts[image]
	if !ok {
		return "", fmt.Errorf("%w: %s is not an image volume of the launcher pod", launcherspec.ErrImageNotFound, image)
	}
	dir, err := r.openMount(image, mount)
	if err != nil {
		return "", err
	}
	defer unix.Close(dir)
	if p == "" {
		if p, err = singleDisk(dir, image); err != nil {
			return "", err
		}
	}
	fd, rel, err := openFile(dir, image, p)
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	return path.Join(mount, rel), nil
}

// Open reads a path File returned, for the node agent's look at the image's header.
func (r *podImages) Open(containerPath string) (*os.File, error) {
	clean := path.Clean(containerPath)
	for image, mount := range r.mounts {
		rel, ok := strings.CutPrefix(clean, mount+"/")
		if !ok {
			continue
		}
		dir, err := r.openMount(image, mount)
		if err != nil {
			return nil, err
		}
		defer unix.Close(dir)
		fd, _, err := openFile(dir, image, rel)
		if err != nil {
			return nil, err
		}
		defer unix.Close(fd)
		// fd is an O_PATH descriptor; reopening it reads exactly the file that was checked.
		f, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			return nil, fmt.Errorf("%s in image %s: %w", rel, image, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s is in no image volume of the launcher pod: %w", containerPath, fs.ErrNotExist)
}

// openMount opens the image's mount point in the launcher's root. Symbolic links on the way
// there belong to the launcher image (Debian's /var/run is one to /run) and are followed, but
// resolved inside the container's root, never the node agent's.
func (r *podImages) openMount(image, mount string) (int, error) {
	root := filepath.Join(r.procRoot, strconv.Itoa(r.pid), "root")
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("image %s: the launcher's root %s: %w", image, root, err)
	}
	defer unix.Close(rootFD)
	fd, err := safepath.Openat2(rootFD, mount, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return -1, fmt.Errorf("image %s: its mount %s in the launcher's container: %w", image, mount, err)
	}
	return fd, nil
}

// singleDisk is the name under /disk/ of the one file there.
func singleDisk(dir int, image string) (string, error) {
	fd, err := safepath.Openat2(dir, diskDir, unix.O_RDONLY|unix.O_DIRECTORY, safepath.Strict)
	switch {
	case errors.Is(err, unix.ELOOP):
		return "", refusedLink(dir, image, diskDir)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return "", fmt.Errorf("image %s has no /%s directory, where a containerDisk keeps its disk: %w", image, diskDir, fs.ErrNotExist)
	case err != nil:
		return "", fmt.Errorf("image %s: /%s: %w", image, diskDir, err)
	}
	d := os.NewFile(uintptr(fd), "/"+diskDir)
	defer d.Close()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return "", fmt.Errorf("image %s: /%s: %w", image, diskDir, err)
	}
	var found []string
	for _, e := range ents {
		if !e.IsDir() {
			found = append(found, e.Name())
		}
	}
	sort.Strings(found)
	switch len(found) {
	case 0:
		return "", fmt.Errorf("image %s: no file in /%s: %w", image, diskDir, fs.ErrNotExist)
	case 1:
		return path.Join(diskDir, found[0]), nil
	}
	return "", fmt.Errorf("image %s: %d files in /%s (%s): set the volume's path to the one to use", image, len(found), diskDir, strings.Join(found, ", "))
}

// openFile opens p in the image mounted at dir as an O_PATH descriptor, and returns it with p
// made relative. No symbolic link is followed: QEMU opens the same path in the container,
// where a link could lead out of the image (an absolute one resolves against the container's
// root).
func openFile(dir int, image, p string) (int, string, error) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return -1, "", fmt.Errorf("%q in image %s names the image's root, not a file", p, image)
	}
	fd, err := safepath.Openat2(dir, rel, unix.O_PATH, safepath.Strict)
	switch {
	case errors.Is(err, unix.ELOOP):
		return -1, "", refusedLink(dir, image, rel)
	case errors.Is(err, unix.EXDEV):
		return -1, "", fmt.Errorf("refused %s in image %s: it leads out of the image", p, image)
	case errors.Is(err, unix.ENOENT):
		return -1, "", fmt.Errorf("%s: no such file in image %s: %w", p, image, fs.ErrNotExist)
	case errors.Is(err, unix.ENOTDIR):
		return -1, "", fmt.Errorf("%s in image %s: a part of the path is not a directory: %w", p, image, fs.ErrNotExist)
	case err != nil:
		return -1, "", fmt.Errorf("%s in image %s: %w", p, image, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("%s in image %s: %w", p, image, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, "", fmt.Errorf("%s in image %s is not a regular file", p, image)
	}
	return fd, rel, nil
}

// refusedLink says which part of rel is the symbolic link that made the open fail.
func refusedLink(dir int, image, rel string) error {
	if prefix, target, ok := safepath.FindLink(dir, rel); ok {
		return fmt.Errorf("refused /%s in image %s: /%s is a symbolic link (to %s), and links in images are not followed so that no path leads out of the image", rel, image, prefix, target)
	}
	return fmt.Errorf("refused /%s in image %s: its path holds a symbolic link, and links in images are not followed so that no path leads out of the image", rel, image)
}

// volumePod is the VMI's launcher pod when the VM has image or secret volumes, which the node
// finds by the pod spec; nil when it has none.
func (h *Handler) volumePod(ctx context.Context, vmi *v1.VirtualMachineInstance) (*corev1.Pod, error) {
	if !bootsFromImages(vmi) && !launcherspec.ReadsSecrets(vmi) && !usesClaims(vmi) {
		return nil, nil
	}
	return h.launcherPod(ctx, vmi)
}

// imagesIn is where the VM's images come from: the launcher pod's image volumes. Without any
// (a VM booting from no image), nil: launcherspec then refuses every image with a clear error.
func imagesIn(vmi *v1.VirtualMachineInstance, pod *corev1.Pod, lc *launcherConn) launcherspec.ImageResolver {
	if !bootsFromImages(vmi) || pod == nil || !hasImageVolumes(pod) {
		return nil
	}
	return newPodImages(pod, lc.pid, "/proc")
}

func bootsFromImages(vmi *v1.VirtualMachineInstance) bool {
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil {
		return true
	}
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil {
			return true
		}
	}
	return false
}

// launcherPod is the VMI's live launcher pod on this node (the cache holds no other node's).
func (h *Handler) launcherPod(ctx context.Context, vmi *v1.VirtualMachineInstance) (*corev1.Pod, error) {
	return h.launcherPodOf(ctx, vmi.Namespace, vmi.UID)
}

// launcherPodOf is launcherPod for the VMI of this namespace and UID.
func (h *Handler) launcherPodOf(ctx context.Context, ns string, uid types.UID) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := h.client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{v1.AppLabel: v1.VirtLauncherAppLabelValue, v1.CreatedByLabel: string(uid)}); err != nil {
		return nil, fmt.Errorf("launcher pod: %w", err)
	}
	var found *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != h.opts.NodeName || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		// There is normally one; should an old one still be stopping, the newest is the one
		// being started.
		if found == nil || found.CreationTimestamp.Before(&p.CreationTimestamp) {
			found = p
		}
	}
	if found == nil {
		return nil, fmt.Errorf("the launcher pod of VMI %s (namespace %s) is not in the node agent's cache yet", uid, ns)
	}
	return found, nil
}

func usesClaims(vmi *v1.VirtualMachineInstance) bool {
	for _, v := range vmi.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return true
		}
	}
	return false
}
