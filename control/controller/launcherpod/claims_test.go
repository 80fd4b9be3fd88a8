package launcherpod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

func TestClaimsAreMountedOrAttachedByVolumeMode(t *testing.T) {
	vmi := testVMI()
	claim := func(name string, ro bool) virtv1.Volume {
		return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-claim", ReadOnly: ro}}}}
	}
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, claim("root", false), claim("raw", false), claim("iso", true))
	opts := DefaultOptions()
	if _, err := RenderLauncherPod(vmi, opts); err == nil || !strings.Contains(err.Error(), `claim "root-claim"`) {
		t.Fatalf("claims not looked up: %v", err)
	}
	block := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{VolumeMode: ptr.To(corev1.PersistentVolumeBlock)}}
	opts.Claims = map[string]*corev1.PersistentVolumeClaim{"root-claim": {}, "raw-claim": block, "iso-claim": {}}
	pod, err := RenderLauncherPod(vmi, opts)
	if err != nil {
		t.Fatal(err)
	}
	vols := map[string]*corev1.PersistentVolumeClaimVolumeSource{}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			vols[v.Name] = v.PersistentVolumeClaim
		}
	}
	if len(vols) != 3 || vols["pvc-root"].ClaimName != "root-claim" || !vols["pvc-iso"].ReadOnly || vols["pvc-root"].ReadOnly {
		t.Fatalf("claim volumes %+v", vols)
	}
	c := pod.Spec.Containers[0]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts["pvc-root"]; m.MountPath != "/var/run/kubevirt-private/vmi-disks/root" || m.ReadOnly {
		t.Errorf("Filesystem claim mount %+v", m)
	}
	if m := mounts["pvc-iso"]; m.MountPath != "/var/run/kubevirt-private/vmi-disks/iso" || !m.ReadOnly {
		t.Errorf("read-only claim mount %+v", m)
	}
	if _, ok := mounts["pvc-raw"]; ok || len(c.VolumeDevices) != 1 || c.VolumeDevices[0] != (corev1.VolumeDevice{Name: "pvc-raw", DevicePath: "/dev/raw"}) {
		t.Errorf("Block claim: mounts %v, devices %+v", mounts, c.VolumeDevices)
	}
}
