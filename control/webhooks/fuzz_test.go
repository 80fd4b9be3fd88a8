/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"os"
	"path/filepath"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// FuzzAdmit feeds arbitrary objects to every admit function without the panic
// guard of the HTTP layer: the rules themselves must not panic.
func FuzzAdmit(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*", "*.yaml"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j, j)
	}
	f.Add([]byte(`{"spec":{"template":null,"domain":{"cpu":null,"devices":{"disks":[{}],"interfaces":[{}]}},"networks":[{}],"volumes":[{}]}}`), []byte(`{}`))
	s := &server{cfg: StaticConfig{FeatureGateHostDisk: true}, opts: Options{}.withDefaults()}
	admits := map[string]admitFunc{
		vmiResource: s.mutateVMI, vmResource: s.mutateVM, migrationResource: s.mutateMigration,
	}
	validators := map[string]admitFunc{
		vmiResource: s.validateVMI, vmResource: s.validateVM, migrationResource: s.validateMigration,
	}
	f.Fuzz(func(t *testing.T, obj, old []byte) {
		for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update} {
			for _, set := range []map[string]admitFunc{admits, validators} {
				for resource, admit := range set {
					resp := admit(&admissionv1.AdmissionRequest{
						Operation: op,
						Resource:  metav1.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: resource},
						Object:    runtime.RawExtension{Raw: obj},
						OldObject: runtime.RawExtension{Raw: old},
						UserInfo:  alice,
					})
					if resp == nil || (!resp.Allowed && resp.Result == nil) {
						t.Fatalf("%s %s: response %+v", op, resource, resp)
					}
				}
			}
		}
	})
}
