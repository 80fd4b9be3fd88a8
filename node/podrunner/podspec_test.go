package podrunner

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// renderedPod is shaped like the pods virt-controller renders (control/controller/launcherpod).
func renderedPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "virt-launcher-fedora-569gd", UID: "pod-uid",
			Labels:          map[string]string{LauncherLabel: LauncherLabelValue, "kubevirt.io/created-by": "vmi-uid"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "VirtualMachineInstance", Name: "fedora", UID: "vmi-uid"}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{
					Name: ComputeContainer, Image: "qvirt/virt-launcher:latest",
					Command:      []string{"/usr/bin/virt-launcher", "--dir", "/var/run/qvirt/vm", "--vmi", "default/fedora", "--stop-grace-period", "180s"},
					Args:         []string{"--log=/var/run/qvirt/vm/sub/x.log", "--scratch", "/scratch/a"},
					VolumeMounts: []corev1.VolumeMount{{Name: "vm-dir", MountPath: "/var/run/qvirt/vm"}, {Name: "scratch", MountPath: "/scratch"}, {Name: "token", MountPath: "/var/run/secrets"}},
					Env: []corev1.EnvVar{
						{Name: "A", Value: "1"},
						{Name: "LD_PRELOAD", Value: "/evil.so"},
						{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					},
				},
				{Name: "volumecontainerdisk", Image: "localhost/qvirt/tiny-disk"},
				{Name: "kernel-boot", Image: "localhost/qvirt/tiny-kernel:latest"},
			},
			Volumes: []corev1.Volume{
				{Name: "vm-dir", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/qvirt/vms/vmi-uid", Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}},
			},
		},
	}
}

func TestParseLauncherPod(t *testing.T) {
	pod := renderedPod()
	lp, err := parseLauncherPod(pod, "/opt/qvirt/bin/virt-launcher", "/state/pods/pod-uid")
	if err != nil {
		t.Fatal(err)
	}
	wantArgv := []string{"/opt/qvirt/bin/virt-launcher", "--dir", "/var/run/qvirt/vms/vmi-uid", "--vmi", "default/fedora", "--stop-grace-period", "180s",
		"--log=/var/run/qvirt/vms/vmi-uid/sub/x.log", "--scratch", "/state/pods/pod-uid/volumes/scratch/a"}
	if !reflect.DeepEqual(lp.argv, wantArgv) {
		t.Errorf("argv:\n got %q\nwant %q", lp.argv, wantArgv)
	}
	if lp.logFile != "/var/run/qvirt/vms/vmi-uid/launcher.log" {
		t.Errorf("log file %s", lp.logFile)
	}
	if !reflect.DeepEqual(lp.hostDirs, []string{"/var/run/qvirt/vms/vmi-uid"}) || !reflect.DeepEqual(lp.emptyDirs, []string{"/state/pods/pod-uid/volumes/scratch"}) {
		t.Errorf("dirs: host %v, empty %v", lp.hostDirs, lp.emptyDirs)
	}
	wantImages := map[string]string{"volumecontainerdisk": "localhost/qvirt/tiny-disk", "kernel-boot": "localhost/qvirt/tiny-kernel:latest"}
	if !reflect.DeepEqual(lp.images, wantImages) {
		t.Errorf("images %v", lp.images)
	}
	env := strings.Join(lp.env, " ")
	if !strings.Contains(env, "A=1") || !strings.Contains(env, "POD=virt-launcher-fedora-569gd") || strings.Contains(env, "LD_PRELOAD") || !strings.HasPrefix(env, "PATH=") {
		t.Errorf("env %q", lp.env)
	}
	if got := vmiName(pod); got != "default/fedora" {
		t.Errorf("vmiName = %q", got)
	}
	pod.OwnerReferences = nil
	if got := vmiName(pod); got != "default/fedora" {
		t.Errorf("vmiName from --vmi = %q", got)
	}
}

func TestParseLauncherPodRefuses(t *testing.T) {
	for name, mutate := range map[string]func(*corev1.Pod){
		"another command": func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "rm -rf /"} },
		"no command":      func(p *corev1.Pod) { p.Spec.Containers[0].Command, p.Spec.Containers[0].Args = nil, nil },
		"no compute":      func(p *corev1.Pod) { p.Spec.Containers[0].Name = "other" },
		"missing volume":  func(p *corev1.Pod) { p.Spec.Volumes = p.Spec.Volumes[1:] },
	} {
		pod := renderedPod()
		mutate(pod)
		if _, err := parseLauncherPod(pod, "/l", "/s"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMapPath(t *testing.T) {
	mounts := map[string]string{"/a": "/host/a", "/a/b": "/host/b", "/": "/root-vol"}
	for in, want := range map[string]string{
		"/a":       "/host/a",
		"/a/x":     "/host/a/x",
		"/a/b/c":   "/host/b/c",
		"/ab":      "/root-vol/ab",
		"relative": "relative",
	} {
		if got := mapPath(in, mounts); got != want {
			t.Errorf("mapPath(%q) = %q, want %q", in, got, want)
		}
	}
	if got := mapArg("--x=/a/y", mounts); got != "--x=/host/a/y" {
		t.Errorf("mapArg = %q", got)
	}
}
