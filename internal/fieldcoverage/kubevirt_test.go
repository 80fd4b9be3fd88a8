/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package fieldcoverage

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/control/operator"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

// kubeVirtSamples are the values of the KubeVirt CR's fields where the generic ones do not do.
var kubeVirtSamples = map[string][]any{
	"spec.imagePullPolicy":                                             {"IfNotPresent", "Always"},
	"spec.uninstallStrategy":                                           {"BlockUninstallIfWorkloadsExist", "RemoveWorkloads"},
	"spec.configuration.evictionStrategy":                              {"None", "LiveMigrate", "LiveMigrateIfPossible", "External"},
	"spec.configuration.machineType":                                   {"q35", "pc"},
	"spec.configuration.imagePullPolicy":                               {"IfNotPresent", "Always"},
	"spec.configuration.network.defaultNetworkInterface":               {"bridge", "masquerade"},
	"spec.configuration.developerConfiguration.memoryOvercommit":       {100, 150},
	"spec.configuration.migrations.parallelMigrationsPerCluster":       {5, 10},
	"spec.configuration.migrations.parallelOutboundMigrationsPerNode":  {2, 4},
	"spec.configuration.tlsConfiguration.minTLSVersion":                {"VersionTLS13"},
	"spec.certificateRotateStrategy.selfSigned.ca.duration":            {"96h"},
	"spec.certificateRotateStrategy.selfSigned.ca.renewBefore":         {"10h"},
	"spec.certificateRotateStrategy.selfSigned.caRotateInterval":       {"96h"},
	"spec.certificateRotateStrategy.selfSigned.caOverlapInterval":      {"10h"},
	"spec.certificateRotateStrategy.selfSigned.certRotateInterval":     {"12h"},
	"spec.certificateRotateStrategy.selfSigned.server.duration":        {"12h"},
	"spec.certificateRotateStrategy.selfSigned.server.renewBefore":     {"1h"},
	"spec.workloadUpdateStrategy.workloadUpdateMethods[]":              {"LiveMigrate", "Evict"},
	"spec.workloadUpdateStrategy.batchEvictionInterval":                {"1m0s"},
	"spec.configuration.developerConfiguration.disabledFeatureGates[]": {"HostDisk"},
}

// kubeVirtAsUnset are values accepted without effect: KubeVirt's defaults, which mean what qvirt
// does.
var kubeVirtAsUnset = map[string]map[string]string{
	"spec.imagePullPolicy":                                            {"IfNotPresent": "KubeVirt's default, written by its release manifest"},
	"spec.uninstallStrategy":                                          {"BlockUninstallIfWorkloadsExist": "KubeVirt's default, and qvirt's"},
	"spec.configuration.evictionStrategy":                             {"None": "KubeVirt's default: no eviction strategy"},
	"spec.configuration.machineType":                                  {"q35": "the default machine type"},
	"spec.configuration.network.defaultNetworkInterface":              {"bridge": "KubeVirt's default, and qvirt's"},
	"spec.configuration.network.permitBridgeInterfaceOnPodNetwork":    {"true": "KubeVirt's default, and qvirt's"},
	"spec.configuration.developerConfiguration.memoryOvercommit":      {"100": "KubeVirt's default: no overcommit, as in qvirt"},
	"spec.configuration.developerConfiguration.useEmulation":          {"false": "the default"},
	"spec.configuration.migrations.parallelMigrationsPerCluster":      {"5": "qvirt's fixed limit, KubeVirt's default"},
	"spec.configuration.migrations.allowAutoConverge":                 {"false": "KubeVirt's default: off"},
	"spec.configuration.migrations.allowPostCopy":                     {"false": "KubeVirt's default: off"},
	"spec.configuration.migrations.parallelOutboundMigrationsPerNode": {"2": "qvirt's fixed limit, KubeVirt's default"},
}

var kubeVirtResource = k8sschema.GroupVersionResource{Group: v1.GroupName, Version: "v1", Resource: "kubevirts"}

// TestKubeVirtFieldsAreReadOrRefused walks every field of the KubeVirt CR's spec: each value must
// change the configuration qvirt's components read from it (control/config) or what virt-operator
// makes of it (operator.SettingsOf), or be refused by
// the API server with the CRD's rules, KubeVirt's own release manifest must be accepted, and the
// values listed in kubeVirtAsUnset accepted without effect. It needs a kube-apiserver for the
// CRD's CEL rules.
func TestKubeVirtFieldsAreReadOrRefused(t *testing.T) {
	c := controlplane.ForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	deploy := filepath.Join("..", "..", "deploy")
	for _, args := range [][]string{
		{"apply", "--server-side", "-f", filepath.Join(deploy, "namespace.yaml")},
		{"apply", "--server-side", "-f", filepath.Join(deploy, "crds", "kubevirt.io_kubevirts.yaml")},
		{"wait", "--for=condition=Established", "--timeout=60s", "crd/kubevirts.kubevirt.io"},
	} {
		c.MustKubectl(t, args...)
	}
	rc := c.RESTConfig()
	rc.QPS, rc.Burst = 1000, 1000
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	kvs := dyn.Resource(kubeVirtResource).Namespace("kubevirt")
	dryRun := func(o map[string]any) error {
		_, err := kvs.Create(ctx, &unstructured.Unstructured{Object: o}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}

	b, err := os.ReadFile(filepath.Join("testdata", "kubevirt-cr-release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]any{}
	if err := yaml.Unmarshal(b, &base); err != nil {
		t.Fatal(err)
	}
	if err := dryRun(deepCopy(base).(map[string]any)); err != nil {
		t.Fatalf("KubeVirt's release CR is refused: %v", err)
	}
	root, _ := loadSchema(t, "kubevirts")
	all := leaves([]string{"spec"}, root.Properties["spec"], true)
	known := map[string]bool{}
	for _, l := range all {
		known[l.path] = true
	}
	for _, k := range append(keysOf(kubeVirtSamples), keysOf(kubeVirtAsUnset)...) {
		if !known[k] {
			t.Errorf("the KubeVirt CR tables name %s, which is no field of its schema", k)
		}
	}
	sampleFor := func(p string, s *schema) []any {
		if v, ok := kubeVirtSamples[pattern(p)]; ok {
			return v
		}
		return genericSamples(s, true)
	}
	for _, l := range all {
		t.Run(l.path, func(t *testing.T) {
			values := kubeVirtSamples[l.path]
			if values == nil {
				values = genericSamples(l.s, l.required)
			}
			cb := &builder{samples: sampleFor}
			if l.required {
				cb.set, cb.value, values = true, values[0], values[1:]
			}
			ctl := cb.build(base, root, l)
			completeKubeVirt(ctl, l.path)
			before, err := snapshots(ctl)
			if err != nil {
				t.Fatal(err)
			}
			if err := dryRun(ctl); err != nil {
				if !refusedByQvirt(err) {
					t.Fatalf("the CR without the field is refused: %v", err)
				}
				t.Logf("refused with its parent: %v", err)
				return
			}
			for _, v := range values {
				key := valueKey(v)
				mut := (&builder{samples: sampleFor, set: true, value: v}).build(base, root, l)
				completeKubeVirt(mut, l.path)
				after, err := snapshots(mut)
				if err != nil {
					t.Fatal(err)
				}
				reason, isDefault := kubeVirtAsUnset[l.path][key]
				read := !equalSnapshots(before, after)
				err = dryRun(mut)
				switch {
				case isDefault && (err != nil || read):
					t.Errorf("%s is listed as the same as unset (%s), but is refused (%v) or read (%v)", key, reason, err, read)
				case isDefault:
					t.Logf("%s: same as unset: %s", key, reason)
				case err != nil && read:
					t.Errorf("%s is read by qvirt's components but refused: %v", key, err)
				case err != nil && !refusedByQvirt(err):
					t.Errorf("%s is refused for another reason than qvirt's rules: give the field well-formed values in kubeVirtSamples: %v", key, err)
				case err != nil:
					t.Logf("%s: refused: %v", key, err)
				case read:
					t.Logf("%s: read", key)
				default:
					t.Errorf("%s is accepted and no component reads it: refuse it with a rule in the CRD (api/v1 markers) or read it in control/config", key)
				}
			}
		})
	}
}

// completeKubeVirt enables the gate a disabledFeatureGates case disables, with and without it.
func completeKubeVirt(o map[string]any, leafPath string) {
	if strings.HasSuffix(leafPath, "disabledFeatureGates[]") {
		obj(o, "spec", "configuration", "developerConfiguration")["featureGates"] = []any{"HostDisk"}
	}
}

// derived is what the components (control/config) and virt-operator make of the CR.
type derived struct {
	components []config.Snapshot
	operator   operator.Settings
}

func snapshots(o map[string]any) (derived, error) {
	kv := &v1.KubeVirt{}
	if err := decode(o, kv); err != nil {
		return derived{}, err
	}
	var out derived
	for _, c := range []config.Component{config.VirtAPI, config.VirtController, config.VirtHandler, config.Webhooks} {
		out.components = append(out.components, config.From(kv, c))
	}
	out.operator, _ = operator.SettingsOf(kv, "kubevirt", "qvirt", "v0.1.0")
	return out, nil
}

func equalSnapshots(a, b derived) bool {
	for i := range a.components {
		if !a.components[i].Equal(b.components[i]) {
			return false
		}
	}
	return reflect.DeepEqual(a.operator, b.operator)
}

func refusedByQvirt(err error) bool {
	return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "qvirt does not support")
}
