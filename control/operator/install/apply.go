package install

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// FieldManager is who the operator's server-side applies are recorded as.
const FieldManager = "virt-operator"

// Applier writes rendered objects.
type Applier struct {
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
}

func (a *Applier) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.Dynamic.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
	}
	return a.Dynamic.Resource(m.Resource), nil
}

// Apply server-side applies every object, forcing ownership of the fields it sets: a field
// someone else changed is set back. A write the server leaves unchanged costs no new revision.
// Each object's generation is set to the server's.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		r, err := a.resource(obj)
		if err != nil {
			return err
		}
		got, err := r.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
		if err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), Name(obj), err)
		}
		// What the server holds now: its generation is what a rollout must have observed.
		obj.SetGeneration(got.GetGeneration())
	}
	return nil
}

// Delete removes every object, last first; what is already gone counts as removed. It reports
// how many were still there.
func (a *Applier) Delete(ctx context.Context, objs []*unstructured.Unstructured) (int, error) {
	left := 0
	for i := len(objs) - 1; i >= 0; i-- {
		obj := objs[i]
		r, err := a.resource(obj)
		if err != nil {
			return left, err
		}
		bg := metav1.DeletePropagationBackground
		err = r.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return left, fmt.Errorf("deleting %s %s: %w", obj.GetKind(), Name(obj), err)
		default:
			left++
		}
	}
	return left, nil
}

// Name is namespace/name, or name for a cluster-scoped object.
func Name(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}
