package operator

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/qvirt/qvirt/control/operator/install"
)

// rendered selects what an installation's rendering made, of whichever version: the
// certificates, the CA bundle and the front-proxy copy carry managed-by only, being the
// operator's own state rather than part of a version.
var rendered = func() labels.Selector {
	s, err := labels.Parse(install.ManagedByLabel + "=" + install.ManagedByValue + "," + install.VersionLabel)
	if err != nil {
		panic(err)
	}
	return s
}()

type objectKey struct {
	kind            schema.GroupKind
	namespace, name string
}

// prune removes what an earlier version installed and this one does not (an object dropped or
// renamed between versions): every rendered object of an owned kind that is not in keep. It
// reports how many such objects are still there, including those it just asked to delete.
func (r *Reconciler) prune(ctx context.Context, keep []*unstructured.Unstructured) (int, error) {
	want := make(map[objectKey]bool, len(keep))
	for _, o := range keep {
		want[objectKey{o.GroupVersionKind().GroupKind(), o.GetNamespace(), o.GetName()}] = true
	}
	log := logr.FromContextOrDiscard(ctx)
	scheme := r.Client.Scheme()
	left := 0
	for _, kind := range owned() {
		gvk, err := apiutil.GVKForObject(kind, scheme)
		if err != nil {
			return left, err
		}
		list, err := newList(scheme, gvk)
		if err != nil {
			return left, err
		}
		if err := r.Client.List(ctx, list, client.MatchingLabelsSelector{Selector: rendered}); err != nil {
			return left, fmt.Errorf("listing %s: %w", gvk.Kind, err)
		}
		err = meta.EachListItem(list, func(item runtime.Object) error {
			obj := item.(client.Object)
			if want[objectKey{gvk.GroupKind(), obj.GetNamespace(), obj.GetName()}] {
				return nil
			}
			left++
			if obj.GetDeletionTimestamp() != nil {
				return nil
			}
			log.Info("Removing an object this version does not install", "kind", gvk.Kind,
				"object", client.ObjectKeyFromObject(obj), "version", obj.GetLabels()[install.VersionLabel])
			err := r.Client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err = client.IgnoreNotFound(err); err != nil {
				return fmt.Errorf("deleting %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
			}
			return nil
		})
		if err != nil {
			return left, err
		}
	}
	return left, nil
}

func newList(scheme *runtime.Scheme, gvk schema.GroupVersionKind) (client.ObjectList, error) {
	o, err := scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, err
	}
	list, ok := o.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("%sList is not a list", gvk.Kind)
	}
	return list, nil
}
