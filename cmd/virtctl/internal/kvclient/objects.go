package kvclient

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// VirtualMachine reads a VM.
func (c *Client) VirtualMachine(ctx context.Context, ns, name string) (*v1.VirtualMachine, error) {
	vm := &v1.VirtualMachine{}
	return vm, c.kv.Get().Namespace(ns).Resource("virtualmachines").Name(name).Do(ctx).Into(vm)
}

// VirtualMachineInstance reads a VMI.
func (c *Client) VirtualMachineInstance(ctx context.Context, ns, name string) (*v1.VirtualMachineInstance, error) {
	vmi := &v1.VirtualMachineInstance{}
	return vmi, c.kv.Get().Namespace(ns).Resource("virtualmachineinstances").Name(name).Do(ctx).Into(vmi)
}

// PersistentVolumeClaim reads a claim.
func (c *Client) PersistentVolumeClaim(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	return pvc, c.core.Get().Namespace(ns).Resource("persistentvolumeclaims").Name(name).Do(ctx).Into(pvc)
}

// CreatePersistentVolumeClaim creates a claim in its namespace.
func (c *Client) CreatePersistentVolumeClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	obj := *pvc
	obj.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"}
	b, err := json.Marshal(&obj)
	if err != nil {
		return err
	}
	return c.core.Post().Namespace(pvc.Namespace).Resource("persistentvolumeclaims").Body(b).Do(ctx).Error()
}
