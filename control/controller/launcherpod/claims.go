package launcherpod

import (
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// Where persistentVolumeClaim volumes appear in the compute container, as in KubeVirt: a
// Filesystem claim is mounted at VMIDisksMountPath/<volume> and its disk is disk.img there; a
// Block claim is the device /dev/<volume>.
const (
	VMIDisksMountPath = "/var/run/kubevirt-private/vmi-disks"
	ClaimDiskFile     = "disk.img"
	BlockDevicesDir   = "/dev"
	// ClaimVolumePrefix starts the pod volume name of each claim.
	ClaimVolumePrefix = "pvc-"
)

// IsBlock reports a claim of volumeMode Block (Filesystem is the default).
func IsBlock(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock
}

// claimVolumes are the pod volumes, mounts and devices of the VMI's claims; claims has each
// claim the VMI names, by claim name.
func claimVolumes(vmi *virtv1.VirtualMachineInstance, claims map[string]*corev1.PersistentVolumeClaim) ([]corev1.Volume, []corev1.VolumeMount, []corev1.VolumeDevice, error) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	var devices []corev1.VolumeDevice
	usedVols, usedDirs := map[string]bool{}, map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		src := v.PersistentVolumeClaim
		if src == nil || v.IsHotplugged() {
			// Hotplugged claims live in attachment pods.
			continue
		}
		pvc := claims[src.ClaimName]
		if pvc == nil {
			return nil, nil, nil, fmt.Errorf("volume %s: claim %q was not looked up", v.Name, src.ClaimName)
		}
		name := ClaimVolumePrefix + safeName(v.Name, validation.DNS1123LabelMaxLength-len(ClaimVolumePrefix), usedVols)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: src.ClaimName, ReadOnly: src.ReadOnly},
		}})
		dir := safeName(v.Name, validation.DNS1123LabelMaxLength, usedDirs)
		if IsBlock(pvc) {
			devices = append(devices, corev1.VolumeDevice{Name: name, DevicePath: path.Join(BlockDevicesDir, dir)})
		} else {
			mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: path.Join(VMIDisksMountPath, dir), ReadOnly: src.ReadOnly})
		}
	}
	return vols, mounts, devices, nil
}
