package vmi

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	virtv1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/controller/internal/vmiutil"
)

// ReasonPVCNotFound is KubeVirt's Synchronized reason of a VMI whose claim does not exist yet.
const ReasonPVCNotFound = "FailedPvcNotFound"

// DefaultFilesystemOverhead is the share of a Filesystem claim kept free of its disk.img (CDI's
// default, which KubeVirt applies when it creates the image).
const DefaultFilesystemOverhead virtv1.Percent = "0.055"

// lookupClaims reads every claim the VMI's volumes name. A missing one is reported as a sync
// failure: the pod waits for it, as in KubeVirt.
func lookupClaims(ctx context.Context, r client.Reader, vmi *virtv1.VirtualMachineInstance) (map[string]*corev1.PersistentVolumeClaim, *syncFailure, error) {
	claims, err := vmiutil.Claims(ctx, r, vmi)
	var missing *vmiutil.MissingClaimError
	if errors.As(err, &missing) {
		return nil, &syncFailure{Reason: ReasonPVCNotFound, Message: missing.Error()}, err
	}
	return claims, nil, err
}

// withClaimStatus returns the volume statuses with each claim volume's persistentVolumeClaimInfo
// set from its claim (the node agent sizes a new disk.img from it), others kept.
func withClaimStatus(vmi *virtv1.VirtualMachineInstance, claims map[string]*corev1.PersistentVolumeClaim) []virtv1.VolumeStatus {
	out := append([]virtv1.VolumeStatus(nil), vmi.Status.VolumeStatus...)
	index := map[string]int{}
	for i := range out {
		index[out[i].Name] = i
	}
	for _, v := range vmi.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := claims[v.PersistentVolumeClaim.ClaimName]
		if pvc == nil {
			continue
		}
		info := claimInfo(pvc)
		if i, ok := index[v.Name]; ok {
			out[i].PersistentVolumeClaimInfo = info
			continue
		}
		out = append(out, virtv1.VolumeStatus{Name: v.Name, PersistentVolumeClaimInfo: info})
	}
	return out
}

// claimInfo is what the VMI's status records of a claim.
func claimInfo(pvc *corev1.PersistentVolumeClaim) *virtv1.PersistentVolumeClaimInfo {
	info := &virtv1.PersistentVolumeClaimInfo{
		ClaimName:   pvc.Name,
		AccessModes: append([]corev1.PersistentVolumeAccessMode(nil), pvc.Spec.AccessModes...),
		VolumeMode:  pvc.Spec.VolumeMode,
		Capacity:    pvc.Status.Capacity.DeepCopy(),
		Requests:    pvc.Spec.Resources.Requests.DeepCopy(),
	}
	if info.VolumeMode == nil || *info.VolumeMode == corev1.PersistentVolumeFilesystem {
		overhead := DefaultFilesystemOverhead
		info.FilesystemOverhead = &overhead
	}
	return info
}
