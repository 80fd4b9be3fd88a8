package launcherpod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func TestEphemeralStorageCountsBlankDisksAndTheVMIsOwn(t *testing.T) {
	vmi := testVMI()
	vmi.Spec.Volumes = append(vmi.Spec.Volumes,
		virtv1.Volume{Name: "a", VolumeSource: virtv1.VolumeSource{EmptyDisk: &virtv1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}},
		virtv1.Volume{Name: "b", VolumeSource: virtv1.VolumeSource{EmptyDisk: &virtv1.EmptyDiskSource{Capacity: resource.MustParse("512Mi")}}})
	pod, err := RenderLauncherPod(vmi, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	res := pod.Spec.Containers[0].Resources
	want := resource.MustParse("1536Mi")
	want.Add(EphemeralStorageOverhead)
	if got := res.Requests[corev1.ResourceEphemeralStorage]; got.Cmp(want) != 0 {
		t.Errorf("request %s, want %s (the blank disks and the overhead)", got.String(), want.String())
	}
	if _, ok := res.Limits[corev1.ResourceEphemeralStorage]; ok {
		t.Error("a limit the VMI did not ask for")
	}

	vmi.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
	vmi.Spec.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("2Gi")}
	pod, err = RenderLauncherPod(vmi, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	res = pod.Spec.Containers[0].Resources
	wantReq, wantLimit := want.DeepCopy(), want.DeepCopy()
	wantReq.Add(resource.MustParse("1Gi"))
	wantLimit.Add(resource.MustParse("2Gi"))
	if got := res.Requests[corev1.ResourceEphemeralStorage]; got.Cmp(wantReq) != 0 {
		t.Errorf("request %s, want %s", got.String(), wantReq.String())
	}
	if got := res.Limits[corev1.ResourceEphemeralStorage]; got.Cmp(wantLimit) != 0 {
		t.Errorf("limit %s, want %s", got.String(), wantLimit.String())
	}
}
