/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

// TestKubeAPIServerRefusesInvalidRateLimits applies the generated KubeVirt CRD to a real
// kube-apiserver and checks that a rate limit no client could work with is refused with the
// field's path, in each component's section, while sound ones are accepted.
func TestKubeAPIServerRefusesInvalidRateLimits(t *testing.T) {
	c := controlplane.ForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	crd := filepath.Join("..", "..", "deploy", "crds", "kubevirt.io_kubevirts.yaml")
	c.MustKubectl(t, "apply", "--server-side", "-f", crd)
	c.MustKubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "-f", crd)
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	kvs := dyn.Resource(schema.GroupVersionResource{Group: GroupName, Version: "v1", Resource: "kubevirts"}).Namespace("default")
	create := func(section string, tb map[string]any) error {
		o := map[string]any{
			"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
			"metadata": map[string]any{"name": "kubevirt"},
			"spec": map[string]any{"configuration": map[string]any{section: map[string]any{
				"restClient": map[string]any{"rateLimiter": map[string]any{"tokenBucketRateLimiter": tb}},
			}}},
		}
		// Strict: an unknown field is refused rather than pruned with a warning.
		_, err := kvs.Create(ctx, &unstructured.Unstructured{Object: o}, metav1.CreateOptions{
			DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
		return err
	}
	for _, section := range []string{"apiConfiguration", "controllerConfiguration", "handlerConfiguration", "webhookConfiguration"} {
		path := "spec.configuration." + section + ".restClient.rateLimiter.tokenBucketRateLimiter."
		t.Run(section, func(t *testing.T) {
			for _, tb := range []map[string]any{
				{"qps": 0.5, "burst": 1},
				{"qps": 5, "burst": 10},
				{"qps": 1e6, "burst": 1 << 20},
			} {
				if err := create(section, tb); err != nil {
					t.Errorf("%v refused: %v", tb, err)
				}
			}
			qps, burst := path+"qps", path+"burst"
			for _, tc := range []struct {
				tb   map[string]any
				want string // in the error
			}{
				{map[string]any{"qps": 0, "burst": 10}, qps + ": Invalid value: 0: " + qps + " in body should be greater than 0"},
				{map[string]any{"qps": -1, "burst": 10}, qps + ": Invalid value: -1: " + qps + " in body should be greater than 0"},
				{map[string]any{"qps": 1e39, "burst": 10}, "must be of type number with format float in " + qps},
				{map[string]any{"qps": "fast", "burst": 10}, qps + `: Invalid value: "string": ` + qps + " in body must be of type number"},
				{map[string]any{"qps": 5, "burst": 0}, burst + ": Invalid value: 0: " + burst + " in body should be greater than or equal to 1"},
				{map[string]any{"qps": 5, "burst": -3}, burst + ": Invalid value: -3: " + burst + " in body should be greater than or equal to 1"},
				{map[string]any{"qps": 5, "burst": 2.5}, burst + " in body must be of type integer"},
				{map[string]any{"qps": 5}, burst + ": Required value"},
				{map[string]any{"burst": 5}, qps + ": Required value"},
				{map[string]any{"qps": 5, "burst": 10, "leak": 1}, `unknown field "` + path + `leak"`},
			} {
				err := create(section, tc.tb)
				switch {
				case err == nil:
					t.Errorf("%v accepted", tc.tb)
				case !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err):
					t.Errorf("%v: refused, but not as invalid: %v", tc.tb, err)
				case !strings.Contains(err.Error(), tc.want):
					t.Errorf("%v: error %q does not say %q", tc.tb, err, tc.want)
				}
			}
		})
	}
}
