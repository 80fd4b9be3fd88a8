package launcherpod

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func TestAttachmentPodHoldsTheClaimOnTheLaunchersNode(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "uid-1"}}
	vol := &virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}, Hotpluggable: true}}}
	fs := &corev1.PersistentVolumeClaim{}
	pod, err := RenderAttachmentPod(vmi, vol, fs, "node-a", DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != AttachmentPodName(vmi, "data") || pod.Labels[virtv1.AppLabel] != HotplugDiskAppLabelValue || pod.Annotations[HotplugVolumeAnnotation] != "data" {
		t.Errorf("identity: %s %v %v", pod.Name, pod.Labels, pod.Annotations)
	}
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || !slices.Equal(terms[0].MatchFields[0].Values, []string{"node-a"}) || pod.Spec.NodeName != "" {
		t.Errorf("node placement: %+v nodeName %q, want the scheduler to place it on node-a", terms, pod.Spec.NodeName)
	}
	c := pod.Spec.Containers[0]
	if c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser != LauncherUID || !*c.SecurityContext.RunAsNonRoot {
		t.Errorf("container runs as %+v, want the qemu user", c.SecurityContext)
	}
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[1].MountPath != HotplugDisksMountPath+"/data" || len(c.VolumeDevices) != 0 {
		t.Errorf("Filesystem claim: mounts %+v devices %+v", c.VolumeMounts, c.VolumeDevices)
	}
	if pod.OwnerReferences[0].UID != vmi.UID || !*pod.OwnerReferences[0].Controller {
		t.Errorf("owner %+v, want the VMI", pod.OwnerReferences)
	}

	block := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{VolumeMode: ptr.To(corev1.PersistentVolumeBlock)}}
	pod, err = RenderAttachmentPod(vmi, vol, block, "node-a", DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if c := pod.Spec.Containers[0]; len(c.VolumeDevices) != 1 || c.VolumeDevices[0].DevicePath != HotplugBlockDevicesDir+"/data" || len(c.VolumeMounts) != 1 {
		t.Errorf("Block claim: mounts %+v devices %+v", c.VolumeMounts, c.VolumeDevices)
	}
	if _, err := RenderAttachmentPod(vmi, &virtv1.Volume{Name: "plain"}, fs, "node-a", DefaultOptions()); err == nil {
		t.Error("a volume that is not hotplugged got an attachment pod")
	}
}

func TestLauncherPodLeavesHotpluggedClaimsOut(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{Volumes: []virtv1.Volume{{Name: "hp", VolumeSource: virtv1.VolumeSource{
		PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}, Hotpluggable: true}}}}}}
	vols, mounts, devices, err := claimVolumes(vmi, nil)
	if err != nil || len(vols)+len(mounts)+len(devices) != 0 {
		t.Errorf("hotplugged claim in the launcher pod: %v %v %v %v", vols, mounts, devices, err)
	}
}
