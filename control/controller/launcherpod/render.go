package launcherpod

import (
	"errors"
	"fmt"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// Names shared with the launcher and the node agent.
const (
	// ComputeContainerName is KubeVirt's name of the container running the VM;
	// tools look the container up by it.
	ComputeContainerName = "compute"
	// LauncherBinary is the virt-launcher path inside the image.
	LauncherBinary = "/usr/bin/virt-launcher"
	// VMDirMountPath is where the per-VM directory appears in the pod.
	VMDirMountPath = "/var/run/qvirt/vm"
	// VMDirVolumeName is the pod volume (an emptyDir) of the per-VM directory.
	VMDirVolumeName = "vm-dir"
	// LauncherUID is the user (and group) virt-launcher and QEMU run as: KubeVirt's qemu.
	LauncherUID int64 = 107
	// SchedulableNodeLabel marks nodes whose node agent can run VMs.
	SchedulableNodeLabel = "kubevirt.io/schedulable"
	// GracePeriodMargin is added to the VMI's grace so that the kubelet does not
	// kill the launcher while it is still waiting for the guest to power off.
	GracePeriodMargin int64 = 15
	// DefaultCPURequest applies when the VMI requests no CPU.
	DefaultCPURequest = "100m"
)

// ErrNoGuestMemory is returned for a VMI that sets neither memory.guest nor a
// memory request or limit (the mutating webhook normally fills one in).
var ErrNoGuestMemory = errors.New("the VMI sets no guest memory, memory request or memory limit")

// RenderLauncherPod returns the launcher pod for vmi. It does not look at the
// VMI's status, so the result only changes when the spec or metadata does.
func RenderLauncherPod(vmi *virtv1.VirtualMachineInstance, opts Options) (*corev1.Pod, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if vmi.Name == "" || vmi.Namespace == "" || vmi.UID == "" {
		return nil, fmt.Errorf("VMI needs a name, a namespace and a UID, got %q/%q uid %q", vmi.Namespace, vmi.Name, vmi.UID)
	}
	res, err := podResources(vmi, opts)
	if err != nil {
		return nil, fmt.Errorf("VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	grace := GracePeriodSeconds(vmi)
	command := []string{LauncherBinary, "--dir", VMDirMountPath, "--ephemeral-dir", EphemeralDisksMountPath,
		"--vmi", vmi.Namespace + "/" + vmi.Name,
		"--stop-grace-period", strconv.FormatInt(grace, 10) + "s",
	}

	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        PodName(vmi.Name, vmi.UID),
			Namespace:   vmi.Namespace,
			Labels:      podLabels(vmi),
			Annotations: map[string]string{virtv1.DomainAnnotation: vmi.Name},
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(vmi, virtv1.VirtualMachineInstanceGroupVersionKind),
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:         ComputeContainerName,
				Image:        opts.Image,
				Command:      command,
				Resources:    res,
				VolumeMounts: []corev1.VolumeMount{{Name: VMDirVolumeName, MountPath: VMDirMountPath}},
				// KubeVirt's qemu user, with no capability: QEMU gets its taps and its
				// vhost-vsock device as descriptors, and its other devices from the
				// device plugins, so the pod passes Pod Security "restricted".
				SecurityContext:          unprivileged(),
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			// The pod's own directory, which the node agent reaches through the kubelet's
			// pod directory: no hostPath, and the kubelet removes it with the pod.
			Volumes: []corev1.Volume{{
				Name:         VMDirVolumeName,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			}},
			// fsGroup makes secrets and claims readable (and writable) by the qemu user.
			SecurityContext: &corev1.PodSecurityContext{
				FSGroup:             ptr.To(LauncherUID),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
			},
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(grace + GracePeriodMargin),
			NodeSelector:                  nodeSelector(vmi.Spec.NodeSelector),
			Affinity:                      vmi.Spec.Affinity.DeepCopy(),
			Tolerations:                   copyTolerations(vmi.Spec.Tolerations),
			SchedulerName:                 vmi.Spec.SchedulerName,
			PriorityClassName:             vmi.Spec.PriorityClassName,
			Hostname:                      vmi.Spec.Hostname,
			Subdomain:                     vmi.Spec.Subdomain,
			DNSPolicy:                     vmi.Spec.DNSPolicy,
			DNSConfig:                     vmi.Spec.DNSConfig.DeepCopy(),
			// The launcher never talks to the API server.
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			ImagePullSecrets:             imagePullSecrets(vmi),
		},
	}
	// The pod's own writable space, for the launcher's containerDisk overlays.
	compute := &pod.Spec.Containers[0]
	compute.VolumeMounts = append(compute.VolumeMounts, corev1.VolumeMount{Name: EphemeralDisksVolumeName, MountPath: EphemeralDisksMountPath})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: EphemeralDisksVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	vols, mounts := imageVolumes(vmi)
	compute.VolumeMounts = append(compute.VolumeMounts, mounts...)
	pod.Spec.Volumes = append(pod.Spec.Volumes, vols...)
	claimVols, claimMounts, claimDevices, err := claimVolumes(vmi, opts.Claims)
	if err != nil {
		return nil, fmt.Errorf("VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	compute.VolumeMounts = append(compute.VolumeMounts, claimMounts...)
	compute.VolumeDevices = append(compute.VolumeDevices, claimDevices...)
	pod.Spec.Volumes = append(pod.Spec.Volumes, claimVols...)
	secretVols, secretMounts := accessCredentialVolumes(vmi)
	compute.VolumeMounts = append(compute.VolumeMounts, secretMounts...)
	pod.Spec.Volumes = append(pod.Spec.Volumes, secretVols...)
	if len(vols) > 0 {
		pod.Spec.SecurityContext.SupplementalGroups = []int64{ImageFilesGroup}
	}
	return pod, nil
}

// unprivileged is the security context of every container qvirt runs in a tenant's pods.
func unprivileged() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                ptr.To(LauncherUID),
		RunAsGroup:               ptr.To(LauncherUID),
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// GracePeriodSeconds is the time the guest gets to shut down.
func GracePeriodSeconds(vmi *virtv1.VirtualMachineInstance) int64 {
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil && *g >= 0 {
		return *g
	}
	return virtv1.DefaultGracePeriodSeconds
}

func podLabels(vmi *virtv1.VirtualMachineInstance) map[string]string {
	labels := maps.Clone(vmi.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// Set last: a VMI label must not hide the pod from the controllers.
	labels[virtv1.AppLabel] = virtv1.VirtLauncherAppLabelValue
	labels[virtv1.CreatedByLabel] = string(vmi.UID)
	labels[virtv1.DeprecatedVirtualMachineNameLabel] = vmi.Name
	return labels
}

func nodeSelector(vmiSelector map[string]string) map[string]string {
	sel := maps.Clone(vmiSelector)
	if sel == nil {
		sel = map[string]string{}
	}
	sel[SchedulableNodeLabel] = "true"
	return sel
}

func copyTolerations(in []corev1.Toleration) []corev1.Toleration {
	if in == nil {
		return nil
	}
	out := make([]corev1.Toleration, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// GuestMemory is the memory the guest sees: memory.guest, else the memory
// request, else the memory limit.
func GuestMemory(vmi *virtv1.VirtualMachineInstance) (resource.Quantity, error) {
	d := vmi.Spec.Domain
	if d.Memory != nil && d.Memory.Guest != nil && d.Memory.Guest.Sign() > 0 {
		return d.Memory.Guest.DeepCopy(), nil
	}
	if q, ok := d.Resources.Requests[corev1.ResourceMemory]; ok && q.Sign() > 0 {
		return q.DeepCopy(), nil
	}
	if q, ok := d.Resources.Limits[corev1.ResourceMemory]; ok && q.Sign() > 0 {
		return q.DeepCopy(), nil
	}
	return resource.Quantity{}, ErrNoGuestMemory
}

// MemoryOverhead is what the pod needs beyond guest memory. The guest share is
// rounded up to whole MiB so that requests read well in kubectl.
func MemoryOverhead(guest resource.Quantity, opts Options) resource.Quantity {
	const mi = 1 << 20
	share := (guest.Value()*opts.GuestOverheadPercent + 100*mi - 1) / (100 * mi) * mi
	total := opts.LauncherOverhead.Value() + opts.QEMUOverhead.Value() + share
	return *resource.NewQuantity(total, resource.BinarySI)
}

func podResources(vmi *virtv1.VirtualMachineInstance, opts Options) (corev1.ResourceRequirements, error) {
	guest, err := GuestMemory(vmi)
	if err != nil {
		return corev1.ResourceRequirements{}, err
	}
	vmiRes := vmi.Spec.Domain.Resources
	overhead := MemoryOverhead(guest, opts)
	if vmiRes.OvercommitGuestOverhead {
		overhead = resource.Quantity{Format: resource.BinarySI}
	}

	memRequest := guest
	if q, ok := vmiRes.Requests[corev1.ResourceMemory]; ok && q.Sign() > 0 {
		memRequest = q.DeepCopy()
	}
	memRequest.Add(overhead)

	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: memRequest}}
	if q, ok := vmiRes.Limits[corev1.ResourceMemory]; ok {
		limit := q.DeepCopy()
		// The limit always carries the overhead, even when the request does not.
		limit.Add(MemoryOverhead(guest, opts))
		res.Limits = corev1.ResourceList{corev1.ResourceMemory: limit}
	}

	cpuLimit, hasCPULimit := vmiRes.Limits[corev1.ResourceCPU]
	switch q, ok := vmiRes.Requests[corev1.ResourceCPU]; {
	case ok:
		res.Requests[corev1.ResourceCPU] = q.DeepCopy()
	case !hasCPULimit:
		res.Requests[corev1.ResourceCPU] = resource.MustParse(DefaultCPURequest)
	}
	// With only a CPU limit the API server defaults the request to it.
	if hasCPULimit {
		if res.Limits == nil {
			res.Limits = corev1.ResourceList{}
		}
		res.Limits[corev1.ResourceCPU] = cpuLimit.DeepCopy()
	}
	ephemeralStorage(vmi, &res)
	// Extended resources are asked for in limits and requests alike.
	for name, q := range deviceResources(vmi, opts.UseEmulation) {
		if res.Limits == nil {
			res.Limits = corev1.ResourceList{}
		}
		res.Limits[name] = q.DeepCopy()
		res.Requests[name] = q
	}
	return res, nil
}
