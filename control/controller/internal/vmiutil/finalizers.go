package vmiutil

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RemoveFinalizers drops names from obj's finalizers with a JSON patch that
// tests the current list first. Unlike a resourceVersion check, the test only
// fails when the finalizers themselves changed, so status writes racing with
// the removal do not force another round. obj is updated from the response.
func RemoveFinalizers(ctx context.Context, c client.Client, obj client.Object, names ...string) error {
	cur := obj.GetFinalizers()
	next := slices.DeleteFunc(slices.Clone(cur), func(f string) bool { return slices.Contains(names, f) })
	if len(next) == len(cur) {
		return nil
	}
	return patchFinalizers(ctx, c, obj, cur, next)
}

// AddFinalizer appends name to obj's finalizers the same way.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) error {
	cur := obj.GetFinalizers()
	if slices.Contains(cur, name) {
		return nil
	}
	return patchFinalizers(ctx, c, obj, cur, append(slices.Clone(cur), name))
}

type jsonPatchOp struct {
	Op    string   `json:"op"`
	Path  string   `json:"path"`
	Value []string `json:"value"`
}

func patchFinalizers(ctx context.Context, c client.Client, obj client.Object, cur, next []string) error {
	if len(cur) == 0 {
		// "test" cannot match an absent list; fall back to the resourceVersion.
		orig := obj.DeepCopyObject().(client.Object)
		obj.SetFinalizers(next)
		return c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	}
	if next == nil {
		next = []string{}
	}
	b, err := json.Marshal([]jsonPatchOp{
		{Op: "test", Path: "/metadata/finalizers", Value: cur},
		{Op: "replace", Path: "/metadata/finalizers", Value: next},
	})
	if err != nil {
		return err
	}
	err = c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, b))
	if apierrors.IsInvalid(err) {
		// The test failed: someone else changed the finalizers first. That is a
		// write race like any other; report it as one.
		gvk, _ := c.GroupVersionKindFor(obj)
		return apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, obj.GetName(), errors.New("its finalizers changed"))
	}
	return err
}
