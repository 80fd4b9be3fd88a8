package launcherspec

import (
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// claimDiskFile is the disk image inside a Filesystem claim, as KubeVirt names it.
const claimDiskFile = "disk.img"

// ClaimDisk is a persistentVolumeClaim volume's disk as the launcher sees it.
type ClaimDisk struct {
	// Path is disk.img in the claim's mount, or the claim's block device.
	Path  string
	Block bool
	// CreateBytes sizes a missing disk.img: the claim's capacity less its filesystem overhead.
	CreateBytes uint64
}

// ClaimDisks finds each claim of the launcher pod in its compute container (a mount or a device),
// by claim name, and sizes Filesystem claims' images from the VMI's volume status.
func ClaimDisks(pod *corev1.Pod, vmi *v1.VirtualMachineInstance) map[string]ClaimDisk {
	byVolume := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			byVolume[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	sizes := map[string]uint64{}
	for _, vs := range vmi.Status.VolumeStatus {
		if info := vs.PersistentVolumeClaimInfo; info != nil {
			sizes[info.ClaimName] = ImageBytes(info)
		}
	}
	out := map[string]ClaimDisk{}
	for _, c := range pod.Spec.Containers {
		if c.Name != ComputeContainer {
			continue
		}
		for _, m := range c.VolumeMounts {
			if claim, ok := byVolume[m.Name]; ok && m.SubPath == "" {
				out[claim] = ClaimDisk{Path: path.Join(m.MountPath, claimDiskFile), CreateBytes: sizes[claim]}
			}
		}
		for _, d := range c.VolumeDevices {
			if claim, ok := byVolume[d.Name]; ok {
				out[claim] = ClaimDisk{Path: d.DevicePath, Block: true}
			}
		}
	}
	return out
}

// ImageBytes is the size of a new disk.img: the claim's capacity (its request while unbound) less
// the filesystem overhead, in whole MiB.
func ImageBytes(info *v1.PersistentVolumeClaimInfo) uint64 {
	q, ok := info.Capacity[corev1.ResourceStorage]
	if !ok {
		q, ok = info.Requests[corev1.ResourceStorage]
	}
	if !ok || q.Sign() <= 0 {
		return 0
	}
	overhead := 0.0
	if info.FilesystemOverhead != nil {
		if f, err := strconv.ParseFloat(string(*info.FilesystemOverhead), 64); err == nil && f >= 0 && f < 1 {
			overhead = f
		}
	}
	size := uint64(float64(q.Value()) * (1 - overhead))
	return size / mib * mib
}
