package api

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// The volume and memory-dump subresources change lists that others change too (the VM
// controller, the node agent, a second caller). Their JSON patches carry test operations on the
// values read, so a change made in between fails the patch instead of being overwritten.

// stored is an object as the API server holds it. Test operations compare against these
// values, not against a re-encoding of the typed object: that may be spelled differently (a
// quantity written 1024Mi comes back as 1Gi, an empty string is dropped) and would never match.
type stored map[string]any

// at returns the stored value under path, nil when absent.
func (s stored) at(path ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(s, path...)
	return v
}

func kubevirtResource(r string) schema.GroupResource {
	return schema.GroupResource{Group: v1.GroupName, Resource: r}
}

// getStored reads name into obj and returns the stored form of the same read. A missing object
// is KubeVirt's NotFound for resource (virtualmachine, virtualmachineinstance).
func (s *Server) getStored(ctx context.Context, ns, name, resource string, obj client.Object) (stored, error) {
	c := s.opts.Clients.KubeVirt()
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(kubevirtResource(resource), name)
		}
		return nil, fmt.Errorf("unable to retrieve %s [%s]: %w", resource, name, err)
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, obj); err != nil {
		return nil, fmt.Errorf("decoding %s [%s]: %w", resource, name, err)
	}
	return stored(u.Object), nil
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// removeOp has no value: RFC 6902 gives remove none.
type removeOp struct {
	Op   string `json:"op"`
	Path string `json:"path"`
}

func testOp(path string, v any) patchOp { return patchOp{"test", path, v} }

// addOp adds, or replaces an object member that is already there.
func addOp(path string, v any) patchOp { return patchOp{"add", path, v} }

// setStatusField sets one field of status, guarded by a test of its stored value. A VM that
// has no status yet gets one: a path under an absent status does not exist to test.
func setStatusField(obj stored, field string, value any) []any {
	if obj.at("status") == nil {
		return []any{testOp("/status", nil), addOp("/status", map[string]any{field: value})}
	}
	return []any{testOp("/status/"+field, obj.at("status", field)), addOp("/status/"+field, value)}
}

// guardedPatch sends a JSON patch to obj, or to its status. An API server that refuses it as
// Invalid (a test failed because the object changed, or the schema refused the result) is
// answered with its own error, as KubeVirt does: KubeVirt's virtctl retries exactly that
// answer.
func (s *Server) guardedPatch(ctx context.Context, obj client.Object, status bool, ops []any, dry bool) error {
	b, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	p := client.RawPatch(types.JSONPatchType, b)
	c := s.opts.Clients.KubeVirt()
	if status {
		var opts []client.SubResourcePatchOption
		if dry {
			opts = append(opts, client.DryRunAll)
		}
		err = c.Status().Patch(ctx, obj, p, opts...)
	} else {
		var opts []client.PatchOption
		if dry {
			opts = append(opts, client.DryRunAll)
		}
		err = c.Patch(ctx, obj, p, opts...)
	}
	switch {
	case err == nil:
		return nil
	case apierrors.IsInvalid(err):
		return err
	default:
		kind := "vmi"
		if _, ok := obj.(*v1.VirtualMachine); ok {
			kind = "vm"
		}
		if status {
			kind += " status"
		}
		return fmt.Errorf("unable to patch %s: %w", kind, err)
	}
}
