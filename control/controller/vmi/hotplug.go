package vmi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
	"github.com/qvirt/qvirt/control/controller/launcherpod"
)

// Reasons of hotplugged volumes' statuses, as KubeVirt's.
const (
	ReasonPVCNotReady       = "PVCNotReady"
	ReasonAttachPodCreated  = "SuccessfulCreate"
	ReasonAttachPodDeleting = "SuccessfulDelete"
)

// syncHotplug keeps one attachment pod per hotplugged volume on the node of a running VMI, and
// reports each volume's phase up to AttachedToNode. The node agent moves it on from there
// (MountedToPod, Ready, UnMountedFromPod), and this never moves a phase back.
func (r *Reconciler) syncHotplug(ctx context.Context, vmi *virtv1.VirtualMachineInstance, launcher *corev1.Pod) error {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(vmi.Namespace), client.MatchingLabels{
		virtv1.AppLabel: launcherpod.HotplugDiskAppLabelValue, virtv1.CreatedByLabel: string(vmi.UID),
	}); err != nil {
		return err
	}
	node := hotplugNode(vmi, launcher)
	want := map[string]*virtv1.Volume{}
	if node != "" {
		for i := range vmi.Spec.Volumes {
			if v := &vmi.Spec.Volumes[i]; v.IsHotplugged() {
				want[v.Name] = v
			}
		}
	}
	if len(want) == 0 && len(list.Items) == 0 && !hasHotplugStatus(vmi) {
		return nil
	}

	statuses := append([]virtv1.VolumeStatus(nil), vmi.Status.VolumeStatus...)
	index := map[string]int{}
	for i := range statuses {
		index[statuses[i].Name] = i
	}
	pods := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		vol := p.Annotations[launcherpod.HotplugVolumeAnnotation]
		pods[vol] = p
		if want[vol] != nil || p.DeletionTimestamp != nil {
			continue
		}
		if i, ok := index[vol]; node != "" && ok && !detachable(statuses[i].Phase) {
			continue // QEMU still has it: the node agent detaches it first
		}
		if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting attachment pod %s: %w", p.Name, err)
		}
		log.FromContext(ctx).Info("Deleting attachment pod", "pod", p.Name, "volume", vol)
	}

	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		if want[v.Name] == nil {
			continue
		}
		vs := virtv1.VolumeStatus{Name: v.Name}
		if j, ok := index[v.Name]; ok {
			vs = *statuses[j].DeepCopy()
		}
		if err := r.syncAttachment(ctx, vmi, v, node, pods[v.Name], &vs); err != nil {
			return err
		}
		if j, ok := index[v.Name]; ok {
			statuses[j] = vs
		} else {
			index[v.Name] = len(statuses)
			statuses = append(statuses, vs)
		}
	}

	// Volumes that left the spec keep their status while their attachment pod goes away.
	out := statuses[:0]
	for _, vs := range statuses {
		if vs.HotplugVolume != nil && want[vs.Name] == nil {
			p := pods[vs.Name]
			if p == nil {
				continue
			}
			if p.DeletionTimestamp != nil {
				vs.Phase, vs.Reason = virtv1.HotplugVolumeDetaching, ReasonAttachPodDeleting
				vs.Message = fmt.Sprintf("Deleting attachment pod %s, for volume %s", p.Name, vs.Name)
			}
		}
		out = append(out, vs)
	}
	if len(out) == 0 {
		out = nil
	}
	if equality.Semantic.DeepEqual(out, vmi.Status.VolumeStatus) {
		return nil
	}
	orig := vmi.DeepCopy()
	vmi.Status.VolumeStatus = out
	return r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// syncAttachment makes the attachment pod of one wanted volume and sets its status.
func (r *Reconciler) syncAttachment(ctx context.Context, vmi *virtv1.VirtualMachineInstance, v *virtv1.Volume, node string, pod *corev1.Pod, vs *virtv1.VolumeStatus) error {
	if vs.HotplugVolume == nil {
		vs.HotplugVolume = &virtv1.HotplugVolumeStatus{}
	}
	if v.MemoryDump != nil && vs.MemoryDumpVolume == nil {
		vs.MemoryDumpVolume = &virtv1.DomainMemoryDumpInfo{ClaimName: v.MemoryDump.ClaimName}
	}
	// Once the attachment pod is on the node, the claim is bound and recorded: it is not read
	// again on every round.
	if pod == nil || pod.Spec.NodeName == "" || vs.PersistentVolumeClaimInfo == nil {
		claim := v.HotplugClaimName()
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: claim}, pvc)
		if apierrors.IsNotFound(err) {
			if pod == nil && attachable(vs.Phase) {
				vs.Phase, vs.Reason = virtv1.VolumePending, ReasonPVCNotReady
				vs.Message = fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, claim)
			}
			return nil
		}
		if err != nil {
			return err
		}
		vs.PersistentVolumeClaimInfo = claimInfo(pvc)
		if pod == nil {
			if pod, err = r.createAttachmentPod(ctx, vmi, v, pvc, node); err != nil {
				return err
			}
		}
		if pod.Spec.NodeName == "" && attachable(vs.Phase) {
			vs.Phase = virtv1.VolumePending
			if pvc.Status.Phase == corev1.ClaimBound {
				vs.Phase = virtv1.VolumeBound
			}
		}
	}
	vs.HotplugVolume.AttachPodName = pod.Name
	vs.HotplugVolume.AttachPodUID = ""
	if vmiutil.PodReady(pod) && pod.Spec.NodeName == node {
		vs.HotplugVolume.AttachPodUID = pod.UID
	}
	if attachable(vs.Phase) {
		if pod.Spec.NodeName == "" {
			vs.Reason, vs.Message = ReasonPVCNotReady, fmt.Sprintf("Waiting for attachment pod %s of volume %s to be scheduled", pod.Name, v.Name)
			return nil
		}
		vs.Phase, vs.Reason = virtv1.HotplugVolumeAttachedToNode, ReasonAttachPodCreated
		vs.Message = fmt.Sprintf("Created hotplug attachment pod %s, for volume %s", pod.Name, v.Name)
		r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, vs.Reason, "AttachVolume", vs.Message)
	}
	return nil
}

func (r *Reconciler) createAttachmentPod(ctx context.Context, vmi *virtv1.VirtualMachineInstance, v *virtv1.Volume, pvc *corev1.PersistentVolumeClaim, node string) (*corev1.Pod, error) {
	pod, err := launcherpod.RenderAttachmentPod(vmi, v, pvc, node, r.Pods)
	if err != nil {
		return nil, err
	}
	err = r.Client.Create(ctx, pod)
	if apierrors.IsAlreadyExists(err) {
		// Still going away after an earlier unplug of the same volume: wait for it.
		existing := &corev1.Pod{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), existing); err != nil {
			return nil, err
		}
		return existing, nil
	}
	if err != nil {
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "AttachVolume", "Error creating attachment pod for volume %s: %v", v.Name, err)
		return nil, fmt.Errorf("creating attachment pod for volume %s: %w", v.Name, err)
	}
	log.FromContext(ctx).Info("Created attachment pod", "pod", pod.Name, "volume", v.Name, "node", node)
	return pod, nil
}

// hotplugNode is the node hotplugged volumes go to: the launcher's, while the VMI runs there and
// is not moving. Elsewise no attachment pod is wanted.
func hotplugNode(vmi *virtv1.VirtualMachineInstance, launcher *corev1.Pod) string {
	if vmi.DeletionTimestamp != nil || vmi.Status.Phase != virtv1.Running || launcher == nil ||
		vmiutil.PodDownOrGoingDown(launcher) || vmiutil.IsMigrating(vmi) {
		return ""
	}
	return launcher.Spec.NodeName
}

func hasHotplugStatus(vmi *virtv1.VirtualMachineInstance) bool {
	for _, vs := range vmi.Status.VolumeStatus {
		if vs.HotplugVolume != nil {
			return true
		}
	}
	return false
}

// attachable phases are this controller's to set; later ones are the node agent's.
func attachable(p virtv1.VolumePhase) bool {
	return p == "" || p == virtv1.VolumePending || p == virtv1.VolumeBound
}

// detachable phases mean QEMU does not hold the volume, so its attachment pod can go.
func detachable(p virtv1.VolumePhase) bool {
	switch p {
	case virtv1.HotplugVolumeMounted, virtv1.VolumeReady, virtv1.MemoryDumpVolumeInProgress:
		return false
	}
	return true
}
