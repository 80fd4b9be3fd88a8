package launcherpod

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml")

func testVMI() *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "fedora",
			Namespace: "default",
			UID:       "0d9c6c6e-2f0b-4f55-a4a8-4b3a1fbb1234",
			Labels:    map[string]string{"app": "web", virtv1.AppLabel: "user-value"},
		},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Domain: virtv1.DomainSpec{
				Memory: &virtv1.Memory{Guest: ptr.To(resource.MustParse("1Gi"))},
			},
			NodeSelector:                  map[string]string{"zone": "a"},
			Tolerations:                   []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: ptr.To[int64](180),
		},
	}
}

func golden(t *testing.T, name string, pod *corev1.Pod) {
	t.Helper()
	got, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("testdata", name+".golden.yaml")
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (run with -update after checking):\n%s", file, got)
	}
}

func TestRenderLauncherPodGolden(t *testing.T) {
	pod, err := RenderLauncherPod(testVMI(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "launcher", pod)
}

func TestRenderMigrationTargetPodGolden(t *testing.T) {
	vmi := testVMI()
	vmi.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r2"}}}},
		}},
	}}
	mig := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "move-fedora", Namespace: "default", UID: "7c1d2e3f-0000-4000-8000-000000000001"},
		Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "fedora", AddedNodeSelector: map[string]string{"zone": "b", "disk": "ssd"}},
	}
	pod, err := RenderMigrationTargetPod(vmi, mig, "node-1", DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name == PodName(vmi.Name, vmi.UID) {
		t.Error("target pod has the source pod's name")
	}
	if vmi.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields != nil {
		t.Error("rendering the target pod changed the VMI's affinity")
	}
	golden(t, "target", pod)
}

func TestPodName(t *testing.T) {
	a := PodName("vm", "uid-1")
	if a != PodName("vm", "uid-1") {
		t.Fatal("PodName is not deterministic")
	}
	if a == PodName("vm", "uid-2") {
		t.Error("different UIDs gave the same name")
	}
	if !strings.HasPrefix(a, "virt-launcher-vm-") || len(a) != len("virt-launcher-vm-")+5 {
		t.Errorf("unexpected name %q", a)
	}
	for _, name := range []string{"vm", strings.Repeat("a", 253), strings.Repeat("a.", 126) + "a", strings.Repeat("a-", 126) + "a"} {
		got := PodName(name, "uid")
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("PodName(%d chars) = %q: %v", len(name), got, errs)
		}
	}
}

func TestRenderLabelsWin(t *testing.T) {
	pod, err := RenderLauncherPod(testVMI(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"app":                                    "web",
		virtv1.AppLabel:                          virtv1.VirtLauncherAppLabelValue,
		virtv1.CreatedByLabel:                    "0d9c6c6e-2f0b-4f55-a4a8-4b3a1fbb1234",
		virtv1.DeprecatedVirtualMachineNameLabel: "fedora",
	}
	for k, v := range want {
		if pod.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if pod.Spec.Containers[0].Image != DefaultImage {
		t.Errorf("image %q, want the default", pod.Spec.Containers[0].Image)
	}
}

func TestRenderResources(t *testing.T) {
	q := resource.MustParse
	noOverhead := DefaultOptions()
	noOverhead.LauncherOverhead, noOverhead.QEMUOverhead, noOverhead.GuestOverheadPercent = resource.Quantity{}, resource.Quantity{}, 0
	for _, tc := range []struct {
		name             string
		opts             Options
		domain           virtv1.DomainSpec
		memReq, memLimit string
		cpuReq, cpuLimit string
		err              error
	}{{
		name:   "guest only",
		opts:   DefaultOptions(),
		domain: virtv1.DomainSpec{Memory: &virtv1.Memory{Guest: ptr.To(q("1Gi"))}},
		// 1Gi + 20Mi + 70Mi + 2% of 1Gi (20.48Mi, rounded up)
		memReq: "1135Mi", cpuReq: "100m",
	}, {
		name:   "request sizes the guest",
		opts:   noOverhead,
		domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q("512Mi"), corev1.ResourceCPU: q("2")}}},
		memReq: "512Mi", cpuReq: "2",
	}, {
		name: "request below guest is kept",
		opts: noOverhead,
		domain: virtv1.DomainSpec{
			Memory:    &virtv1.Memory{Guest: ptr.To(q("2Gi"))},
			Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}},
		},
		memReq: "1Gi", cpuReq: "100m",
	}, {
		name:   "limits get the overhead",
		opts:   DefaultOptions(),
		domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("100Mi"), corev1.ResourceCPU: q("1")}}},
		// 100Mi + 90Mi + 2% of 100Mi
		memReq: "192Mi", memLimit: "192Mi", cpuLimit: "1",
	}, {
		name: "overcommit drops the overhead from the request only",
		opts: DefaultOptions(),
		domain: virtv1.DomainSpec{
			Memory:    &virtv1.Memory{Guest: ptr.To(q("100Mi"))},
			Resources: virtv1.ResourceRequirements{OvercommitGuestOverhead: true, Limits: corev1.ResourceList{corev1.ResourceMemory: q("100Mi")}},
		},
		memReq: "100Mi", memLimit: "192Mi", cpuReq: "100m",
	}, {
		name: "no memory", opts: DefaultOptions(), err: ErrNoGuestMemory,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := testVMI()
			vmi.Spec.Domain = tc.domain
			pod, err := RenderLauncherPod(vmi, tc.opts)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := pod.Spec.Containers[0].Resources
			check := func(what string, list corev1.ResourceList, name corev1.ResourceName, want string) {
				got, ok := list[name]
				switch {
				case want == "" && ok:
					t.Errorf("%s = %s, want none", what, got.String())
				case want != "" && (!ok || got.Cmp(q(want)) != 0):
					t.Errorf("%s = %s, want %s", what, got.String(), want)
				}
			}
			check("memory request", r.Requests, corev1.ResourceMemory, tc.memReq)
			check("memory limit", r.Limits, corev1.ResourceMemory, tc.memLimit)
			check("cpu request", r.Requests, corev1.ResourceCPU, tc.cpuReq)
			check("cpu limit", r.Limits, corev1.ResourceCPU, tc.cpuLimit)
		})
	}
}

func TestRenderGrace(t *testing.T) {
	vmi := testVMI()
	vmi.Spec.TerminationGracePeriodSeconds = nil
	pod, err := RenderLauncherPod(vmi, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := *pod.Spec.TerminationGracePeriodSeconds; got != virtv1.DefaultGracePeriodSeconds+GracePeriodMargin {
		t.Errorf("grace %d, want %d", got, virtv1.DefaultGracePeriodSeconds+GracePeriodMargin)
	}
	cmd := strings.Join(pod.Spec.Containers[0].Command, " ")
	if !strings.HasSuffix(cmd, "--stop-grace-period 30s") {
		t.Errorf("command %q", cmd)
	}
}

func TestRenderRejects(t *testing.T) {
	vmi := testVMI()
	vmi.UID = ""
	if _, err := RenderLauncherPod(vmi, DefaultOptions()); err == nil {
		t.Error("a VMI without UID was rendered")
	}
	opts := DefaultOptions()
	opts.GuestOverheadPercent = 101
	if _, err := RenderLauncherPod(testVMI(), opts); err == nil {
		t.Error("an overhead over 100% was accepted")
	}
	if _, err := RenderMigrationTargetPod(testVMI(), &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{UID: "u"}}, "", DefaultOptions()); err == nil {
		t.Error("a target pod without source node was rendered")
	}
}

// bootImagesVMI boots from two containerDisks and a kernelBoot image, with pull secrets (one
// named twice) and pull policies.
func bootImagesVMI() *virtv1.VirtualMachineInstance {
	vmi := testVMI()
	vmi.Spec.Domain.Firmware = &virtv1.Firmware{KernelBoot: &virtv1.KernelBoot{Container: &virtv1.KernelBootContainer{
		Image: "registry.example/kernels/tiny:6.1", ImagePullSecret: "registry-creds", ImagePullPolicy: corev1.PullIfNotPresent,
		KernelPath: "/boot/vmlinuz",
	}}}
	vmi.Spec.Volumes = []virtv1.Volume{
		{Name: "rootdisk", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{
			Image: "registry.example/disks/fedora:43", ImagePullSecret: "registry-creds", ImagePullPolicy: corev1.PullAlways,
		}}},
		{Name: "ci", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserData: "#!/bin/sh"}}},
		{Name: "Data_Disk.with-a-name-that-is-far-too-long-for-a-pod-volume", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{
			Image: "registry.example/disks/data:1", ImagePullSecret: "other-creds", Path: "/disk/data.raw",
		}}},
	}
	return vmi
}

func TestRenderImageVolumesGolden(t *testing.T) {
	pod, err := RenderLauncherPod(bootImagesVMI(), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "launcher-image-volumes", pod)
}

func TestImageVolumes(t *testing.T) {
	vmi := bootImagesVMI()
	pod, err := RenderLauncherPod(vmi, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want only compute", len(pod.Spec.Containers))
	}
	byName := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 {
			t.Errorf("volume name %q: %v", v.Name, errs)
		}
		if _, dup := byName[v.Name]; dup {
			t.Errorf("volume %q twice", v.Name)
		}
		byName[v.Name] = v
	}
	mountOf := map[string]corev1.VolumeMount{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mountOf[m.Name] = m
	}
	wantImages := map[string]string{ // mount path -> image
		"/var/run/kubevirt/container-disks/rootdisk": "registry.example/disks/fedora:43",
		"/var/run/kubevirt/kernel-boot":              "registry.example/kernels/tiny:6.1",
	}
	images := 0
	for name, v := range byName {
		if v.Image == nil {
			continue
		}
		images++
		m, ok := mountOf[name]
		if !ok || !m.ReadOnly {
			t.Errorf("image volume %s: mount %+v, want a read-only mount", name, m)
		}
		if want, ok := wantImages[m.MountPath]; ok && v.Image.Reference != want {
			t.Errorf("%s mounts %s, want %s", m.MountPath, v.Image.Reference, want)
		}
		if !strings.HasPrefix(m.MountPath, ContainerDisksMountPath+"/") && m.MountPath != KernelBootMountPath {
			t.Errorf("image volume %s mounted at %s", name, m.MountPath)
		}
		if dir := filepath.Base(m.MountPath); len(validation.IsDNS1123Label(dir)) > 0 {
			t.Errorf("mount directory %q is not a DNS-1123 label", dir)
		}
	}
	if images != 3 {
		t.Errorf("%d image volumes, want 3", images)
	}
	if v := byName["container-disk-rootdisk"]; v.Image == nil || v.Image.PullPolicy != corev1.PullAlways {
		t.Errorf("rootdisk volume %+v, want image volume container-disk-rootdisk pulled Always", v)
	}
	if m := mountOf[EphemeralDisksVolumeName]; m.MountPath != EphemeralDisksMountPath || m.ReadOnly || byName[EphemeralDisksVolumeName].EmptyDir == nil {
		t.Errorf("ephemeral disks: mount %+v, volume %+v", m, byName[EphemeralDisksVolumeName])
	}
	cmd := strings.Join(pod.Spec.Containers[0].Command, " ")
	if !strings.Contains(cmd, " --ephemeral-dir "+EphemeralDisksMountPath+" ") {
		t.Errorf("command %q does not pass the ephemeral directory", cmd)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || !reflect.DeepEqual(sc.SupplementalGroups, []int64{ImageFilesGroup}) {
		t.Errorf("pod security context %+v, want the image files' group", sc)
	}
	want := []corev1.LocalObjectReference{{Name: "registry-creds"}, {Name: "other-creds"}}
	if !reflect.DeepEqual(pod.Spec.ImagePullSecrets, want) {
		t.Errorf("imagePullSecrets %v, want %v", pod.Spec.ImagePullSecrets, want)
	}
}

func TestSafeNameKeepsNamesValidAndApart(t *testing.T) {
	long := strings.Repeat("x", 80)
	names := []string{"root", "Root", "ROOT", "a_b", "a.b", "a-b", "-", "é", long, long + "y", "a-b", "container-disk-x"}
	used := map[string]bool{}
	const maxLen = 63 - len(ContainerDiskVolumePrefix)
	for _, n := range names {
		got := safeName(n, maxLen, used)
		if errs := validation.IsDNS1123Label(ContainerDiskVolumePrefix + got); len(errs) > 0 || len(got) > maxLen {
			t.Errorf("safeName(%q) = %q: %v", n, got, errs)
		}
	}
	if len(used) != len(names) {
		t.Errorf("%d distinct names for %d volumes: %v", len(used), len(names), used)
	}
	if got := safeName("rootdisk", maxLen, map[string]bool{}); got != "rootdisk" {
		t.Errorf("a valid name was rewritten to %q", got)
	}
}
