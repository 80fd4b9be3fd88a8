package podrunner

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

const (
	// LauncherLabel marks the pods the runner runs: launcher pods (value LauncherLabelValue).
	LauncherLabel      = "kubevirt.io"
	LauncherLabelValue = "virt-launcher"
	// ComputeContainer is the launcher pod's container that runs virt-launcher.
	ComputeContainer = "compute"
	// launcherCommand is virt-launcher's path in the launcher image.
	launcherCommand = "/usr/bin/virt-launcher"
)

func isLauncherPod(pod *corev1.Pod) bool { return pod.Labels[LauncherLabel] == LauncherLabelValue }

// launcherPod is how a launcher pod runs on this machine, without a mount namespace: the
// launcher binary, with every path under a volume mount rewritten to the volume's host path.
type launcherPod struct {
	argv    []string
	env     []string
	workDir string
	// hostDirs are created before the start; emptyDirs too, and removed with the pod.
	hostDirs, emptyDirs []string
	logFile             string
	// images are the VM images the pod's other containers name (containerDisk, kernelBoot), by
	// container name.
	images map[string]string
}

// parseLauncherPod reads the compute container of pod. podDir is the runner's directory for the
// pod (emptyDir volumes and the fallback log live there). Only virt-launcher is ever run: a
// compute container running anything else is refused.
func parseLauncherPod(pod *corev1.Pod, launcherBinary, podDir string) (*launcherPod, error) {
	var compute *corev1.Container
	images := map[string]string{}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name == ComputeContainer {
			compute = c
			continue
		}
		images[c.Name] = c.Image
	}
	if compute == nil {
		return nil, fmt.Errorf("no %q container", ComputeContainer)
	}
	argv := append(append([]string{}, compute.Command...), compute.Args...)
	if len(argv) == 0 || (argv[0] != launcherCommand && path.Base(argv[0]) != "virt-launcher") {
		return nil, fmt.Errorf("container %q runs %q: only %s can run here", ComputeContainer, strings.Join(argv, " "), launcherCommand)
	}
	argv[0] = launcherBinary

	lp := &launcherPod{images: images}
	mounts, err := lp.mounts(pod, compute, podDir)
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(argv); i++ {
		argv[i] = mapArg(argv[i], mounts)
	}
	lp.argv = argv
	lp.workDir = "/"
	if compute.WorkingDir != "" {
		lp.workDir = mapPath(compute.WorkingDir, mounts)
	}
	lp.env = containerEnv(pod, compute)
	lp.logFile = filepath.Join(podDir, "launcher.log")
	for _, m := range compute.VolumeMounts {
		if v := volume(pod, m.Name); v != nil && v.HostPath != nil {
			lp.logFile = filepath.Join(mounts[path.Clean(m.MountPath)], "launcher.log")
			break
		}
	}
	return lp, nil
}

// mounts maps the compute container's mount paths to host paths and records the directories to
// create.
func (lp *launcherPod) mounts(pod *corev1.Pod, c *corev1.Container, podDir string) (map[string]string, error) {
	m := map[string]string{}
	for _, vm := range c.VolumeMounts {
		v := volume(pod, vm.Name)
		if v == nil {
			return nil, fmt.Errorf("volume mount %q: no such volume", vm.Name)
		}
		var host string
		switch {
		case v.HostPath != nil:
			host = filepath.Clean(v.HostPath.Path)
			if t := v.HostPath.Type; t == nil || *t == "" || *t == corev1.HostPathDirectoryOrCreate {
				lp.hostDirs = append(lp.hostDirs, host)
			}
		case v.EmptyDir != nil:
			host = filepath.Join(podDir, "volumes", v.Name)
			lp.emptyDirs = append(lp.emptyDirs, host)
		default:
			// Secrets, config maps and the like are not provided: the launcher does not use them.
			continue
		}
		if vm.SubPath != "" {
			host = filepath.Join(host, filepath.Clean("/"+vm.SubPath))
		}
		m[path.Clean(vm.MountPath)] = host
	}
	return m, nil
}

func volume(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

// mapArg rewrites an argument that is a path under a mount, alone or as a flag's value
// (--dir=/var/run/qvirt/vm).
func mapArg(arg string, mounts map[string]string) string {
	if strings.HasPrefix(arg, "-") {
		if name, val, ok := strings.Cut(arg, "="); ok {
			return name + "=" + mapPath(val, mounts)
		}
		return arg
	}
	return mapPath(arg, mounts)
}

// mapPath maps p through the longest mount path containing it.
func mapPath(p string, mounts map[string]string) string {
	if !strings.HasPrefix(p, "/") {
		return p
	}
	clean := path.Clean(p)
	best := ""
	for mp := range mounts {
		if (clean == mp || strings.HasPrefix(clean, mp+"/") || mp == "/") && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return p
	}
	return filepath.Join(mounts[best], strings.TrimPrefix(clean, best))
}

// containerEnv is the launcher's environment: the runner's PATH (QEMU is looked up in it) and
// the container's literal and downward-API values. LD_* variables are dropped: the process runs
// as root on the host, not in an image.
func containerEnv(pod *corev1.Pod, c *corev1.Container) []string {
	pathEnv := os.Getenv("PATH")
	if pathEnv == "" {
		pathEnv = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	env := []string{"PATH=" + pathEnv}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "LD_") {
			continue
		}
		val := e.Value
		if e.ValueFrom != nil {
			f := e.ValueFrom.FieldRef
			if f == nil {
				continue
			}
			switch f.FieldPath {
			case "metadata.name":
				val = pod.Name
			case "metadata.namespace":
				val = pod.Namespace
			case "metadata.uid":
				val = string(pod.UID)
			case "spec.nodeName":
				val = pod.Spec.NodeName
			case "spec.serviceAccountName":
				val = pod.Spec.ServiceAccountName
			default:
				continue
			}
		}
		env = append(env, e.Name+"="+val)
	}
	return env
}

// vmiName is namespace/name of the VMI the pod runs, for logs: from the owner reference, else
// from the launcher's --vmi flag.
func vmiName(pod *corev1.Pod) string {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "VirtualMachineInstance" {
			return pod.Namespace + "/" + o.Name
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != ComputeContainer {
			continue
		}
		args := append(append([]string{}, c.Command...), c.Args...)
		for j, a := range args {
			if v, ok := strings.CutPrefix(a, "--vmi="); ok {
				return v
			}
			if a == "--vmi" && j+1 < len(args) {
				return args[j+1]
			}
		}
	}
	return ""
}
