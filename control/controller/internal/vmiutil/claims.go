package vmiutil

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	virtv1 "github.com/qvirt/qvirt/api/v1"
)

// MissingClaimError names a claim a VMI's volume refers to that does not exist.
type MissingClaimError struct{ Namespace, Name string }

func (e *MissingClaimError) Error() string {
	return fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", e.Namespace, e.Name)
}

// Claims reads every claim the VMI's persistentVolumeClaim volumes name, by claim name, but for
// hotplugged ones, which never hold up the launcher pod.
func Claims(ctx context.Context, r client.Reader, vmi *virtv1.VirtualMachineInstance) (map[string]*corev1.PersistentVolumeClaim, error) {
	claims := map[string]*corev1.PersistentVolumeClaim{}
	for _, v := range vmi.Spec.Volumes {
		src := v.PersistentVolumeClaim
		if src == nil || v.IsHotplugged() || claims[src.ClaimName] != nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: src.ClaimName}, pvc)
		if apierrors.IsNotFound(err) {
			return nil, &MissingClaimError{Namespace: vmi.Namespace, Name: src.ClaimName}
		}
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: %w", vmi.Namespace, src.ClaimName, err)
		}
		claims[src.ClaimName] = pvc
	}
	return claims, nil
}
