package launcherspec

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/qvirt/qvirt/api/v1"
)

func TestClaimDisksFindMountsAndDevicesAndSizeImages(t *testing.T) {
	overhead := v1.Percent("0.055")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "pvc-root", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "root"}}},
			{Name: "pvc-raw", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "raw"}}},
			{Name: "other", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		Containers: []corev1.Container{
			{Name: "sidecar", VolumeMounts: []corev1.VolumeMount{{Name: "pvc-root", MountPath: "/elsewhere"}}},
			{Name: ComputeContainer,
				VolumeMounts:  []corev1.VolumeMount{{Name: "pvc-root", MountPath: "/var/run/kubevirt-private/vmi-disks/root"}, {Name: "other", MountPath: "/x"}},
				VolumeDevices: []corev1.VolumeDevice{{Name: "pvc-raw", DevicePath: "/dev/raw"}}},
		},
	}}
	vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{VolumeStatus: []v1.VolumeStatus{
		{Name: "root", PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: "root", FilesystemOverhead: &overhead,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}}}
	got := ClaimDisks(pod, vmi)
	// 1 GiB less 5.5 %, rounded down to whole MiB.
	want := map[string]ClaimDisk{
		"root": {Path: "/var/run/kubevirt-private/vmi-disks/root/disk.img", CreateBytes: 967 << 20},
		"raw":  {Path: "/dev/raw", Block: true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
}

func TestImageBytesFallsBackToTheRequestAndRefusesNothingKnown(t *testing.T) {
	info := &v1.PersistentVolumeClaimInfo{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}}
	if got := ImageBytes(info); got != 64<<20 {
		t.Errorf("unbound claim of 64Mi, no overhead: %d", got)
	}
	if got := ImageBytes(&v1.PersistentVolumeClaimInfo{}); got != 0 {
		t.Errorf("no size known: %d, want 0 (a missing disk.img is then an error)", got)
	}
}
