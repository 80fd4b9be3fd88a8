package launcherpod

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// Volumes and paths of a pod whose VM images are image volumes. The mount paths are KubeVirt's;
// the node agent finds an image's mount by its reference in the pod spec, not by these names.
const (
	// ContainerDisksMountPath holds one directory per containerDisk volume.
	ContainerDisksMountPath = "/var/run/kubevirt/container-disks"
	// KernelBootMountPath is where the kernelBoot container image appears.
	KernelBootMountPath = "/var/run/kubevirt/kernel-boot"
	// KernelBootVolumeName is the pod volume of the kernelBoot image.
	KernelBootVolumeName = "kernel-boot"
	// ContainerDiskVolumePrefix starts the pod volume name of each containerDisk.
	ContainerDiskVolumePrefix = "container-disk-"
	// EphemeralDisksMountPath is the pod's own writable space: the launcher keeps containerDisk
	// overlays there, so they go with the pod.
	EphemeralDisksMountPath = "/var/run/kubevirt-ephemeral-disks"
	// EphemeralDisksVolumeName is the emptyDir mounted at EphemeralDisksMountPath.
	EphemeralDisksVolumeName = "ephemeral-disks"
	// ImageFilesGroup is KubeVirt's qemu group (107), which containerDisk images commonly give
	// their files to, readable by group only. The compute container runs as root without
	// CAP_DAC_OVERRIDE, so it needs the group to read them.
	ImageFilesGroup int64 = 107
)

// imageVolumes mounts every image the VM boots from (containerDisk volumes, the kernelBoot
// container) read-only into the compute container. The kubelet pulls them with the pod, so a
// missing image keeps the pod from starting, as with KubeVirt's image containers.
func imageVolumes(vmi *virtv1.VirtualMachineInstance) ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	add := func(name, mountPath, image string, policy corev1.PullPolicy) {
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: image, PullPolicy: policy},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: mountPath, ReadOnly: true})
	}
	usedVols, usedDirs := map[string]bool{}, map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		cd := v.ContainerDisk
		if cd == nil {
			continue
		}
		name := ContainerDiskVolumePrefix + safeName(v.Name, validation.DNS1123LabelMaxLength-len(ContainerDiskVolumePrefix), usedVols)
		dir := safeName(v.Name, validation.DNS1123LabelMaxLength, usedDirs)
		add(name, path.Join(ContainerDisksMountPath, dir), cd.Image, cd.ImagePullPolicy)
	}
	if kb := kernelBootContainer(vmi); kb != nil {
		add(KernelBootVolumeName, KernelBootMountPath, kb.Image, kb.ImagePullPolicy)
	}
	return vols, mounts
}

// imagePullSecrets are the secrets the VMI names for its images, each once, in spec order.
func imagePullSecrets(vmi *virtv1.VirtualMachineInstance) []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	seen := map[string]bool{}
	add := func(name string) {
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, corev1.LocalObjectReference{Name: name})
		}
	}
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil {
			add(v.ContainerDisk.ImagePullSecret)
		}
	}
	if kb := kernelBootContainer(vmi); kb != nil {
		add(kb.ImagePullSecret)
	}
	return out
}

func kernelBootContainer(vmi *virtv1.VirtualMachineInstance) *virtv1.KernelBootContainer {
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil {
		return fw.KernelBoot.Container
	}
	return nil
}

// nameHashLength is how many hex digits of a name's hash tell names apart that had to be
// rewritten.
const nameHashLength = 10

// safeName returns name if it is a DNS-1123 label of at most maxLen characters, else one made of
// name's valid characters and a hash of name; either way one that used does not hold yet, which
// it then does. VMI volume names are not held to DNS-1123, pod volume names are.
func safeName(name string, maxLen int, used map[string]bool) string {
	s := name
	for n := 0; len(s) > maxLen || len(validation.IsDNS1123Label(s)) > 0 || used[s]; n++ {
		salted := name
		if n > 0 {
			salted += "#" + strconv.Itoa(n)
		}
		sum := sha256.Sum256([]byte(salted))
		hash := hex.EncodeToString(sum[:])[:nameHashLength]
		keep := sanitize(name)
		if l := maxLen - nameHashLength - 1; len(keep) > l {
			keep = strings.Trim(keep[:l], "-")
		}
		s = hash
		if keep != "" {
			s = keep + "-" + hash
		}
	}
	used[s] = true
	return s
}

// sanitize keeps what a DNS-1123 label allows: lower case letters, digits and inner dashes.
func sanitize(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}
