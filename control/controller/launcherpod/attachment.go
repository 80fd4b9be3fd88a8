package launcherpod

import (
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// An attachment pod holds one hotplugged claim on the node of its VMI, so the kubelet attaches
// and mounts the claim there. Its container serves the claim's disk (or a new memory dump file)
// as open descriptors on a socket in its own emptyDir, which the node agent reaches through the
// kubelet's pod directory and hands on to QEMU: the launcher pod itself never changes.
const (
	// HotplugDiskAppLabelValue is the AppLabel value of attachment pods, as in KubeVirt.
	HotplugDiskAppLabelValue = "hotplug-disk"
	// HotplugVolumeAnnotation on an attachment pod names the VMI volume it holds.
	HotplugVolumeAnnotation = "kubevirt.io/hotplug-volume"
	// HotplugContainerName is the attachment pod's container.
	HotplugContainerName = "hotplug-disk"
	// HotplugSocketVolumeName is the emptyDir holding the descriptor socket.
	HotplugSocketVolumeName = "hotplug"
	HotplugSocketDir        = "/var/run/kubevirt/hotplug"
	// HotplugSocketName is the socket's file name in that emptyDir.
	HotplugSocketName = "volumes.sock"
	// HotplugDisksMountPath is where a Filesystem claim is mounted, in a directory named after
	// the volume; a Block claim is the device /dev/hotplug-disks/<volume>.
	HotplugDisksMountPath  = "/var/run/kubevirt/hotplug-disks"
	HotplugBlockDevicesDir = "/dev/hotplug-disks"
	hotplugPodPrefix       = "hp-volume-"
	hotplugClaimVolumeName = "hotplug-claim"
)

// The attachment container only opens files; these bound it well above its needs.
var (
	hotplugCPU    = resource.MustParse("10m")
	hotplugMemory = resource.MustParse("40Mi")
)

// AttachmentPodName is deterministic per VMI and volume, so a controller whose cache lags gets
// AlreadyExists rather than a second pod.
func AttachmentPodName(vmi *virtv1.VirtualMachineInstance, volume string) string {
	return hotplugPodPrefix + hashSuffix(string(vmi.UID)+"/"+volume)
}

// RenderAttachmentPod returns the attachment pod of a hotplugged volume of vmi, pinned to the
// node its launcher runs on.
func RenderAttachmentPod(vmi *virtv1.VirtualMachineInstance, volume *virtv1.Volume, pvc *corev1.PersistentVolumeClaim, node string, opts Options) (*corev1.Pod, error) {
	opts = opts.withDefaults()
	claim := volume.HotplugClaimName()
	if claim == "" {
		return nil, fmt.Errorf("volume %s is not hotplugged", volume.Name)
	}
	if node == "" {
		return nil, fmt.Errorf("VMI %s/%s runs on no node yet", vmi.Namespace, vmi.Name)
	}
	dir := safeName(volume.Name, validation.DNS1123LabelMaxLength, map[string]bool{})
	container := corev1.Container{
		Name:  HotplugContainerName,
		Image: opts.Image,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: hotplugCPU, corev1.ResourceMemory: hotplugMemory},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: hotplugCPU, corev1.ResourceMemory: hotplugMemory},
		},
		VolumeMounts:             []corev1.VolumeMount{{Name: HotplugSocketVolumeName, MountPath: HotplugSocketDir}},
		SecurityContext:          unprivileged(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	var where string
	if IsBlock(pvc) {
		where = path.Join(HotplugBlockDevicesDir, dir)
		container.VolumeDevices = []corev1.VolumeDevice{{Name: hotplugClaimVolumeName, DevicePath: where}}
	} else {
		where = path.Join(HotplugDisksMountPath, dir)
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: hotplugClaimVolumeName, MountPath: where})
	}
	container.Command = []string{LauncherBinary,
		"--serve-hotplug-volume", path.Join(HotplugSocketDir, HotplugSocketName),
		"--hotplug-volume-path", where,
		"--vmi", vmi.Namespace + "/" + vmi.Name,
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      AttachmentPodName(vmi, volume.Name),
			Namespace: vmi.Namespace,
			Labels: map[string]string{
				virtv1.AppLabel:       HotplugDiskAppLabelValue,
				virtv1.CreatedByLabel: string(vmi.UID),
			},
			Annotations: map[string]string{HotplugVolumeAnnotation: volume.Name},
			// Owned by the VMI, so the VMI controller hears of it and the garbage collector
			// removes it with the VMI; the controller removes it with the launcher.
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, virtv1.VirtualMachineInstanceGroupVersionKind)},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{container},
			Volumes: []corev1.Volume{
				{Name: HotplugSocketVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: hotplugClaimVolumeName, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
				}},
			},
			SecurityContext: &corev1.PodSecurityContext{
				FSGroup:             ptr.To(LauncherUID),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
			},
			// Through the scheduler rather than nodeName, so a WaitForFirstConsumer claim binds
			// on that node.
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
						Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
					}}}},
				},
			}},
			Tolerations:                   copyTolerations(vmi.Spec.Tolerations),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			PriorityClassName:             vmi.Spec.PriorityClassName,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
		},
	}, nil
}
