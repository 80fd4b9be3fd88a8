/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/qvirt/qvirt/api/v1"
)

// fixture is one manifest of testdata/valid or testdata/invalid with what its
// comment header says about it.
type fixture struct {
	name        string
	json        []byte
	kind        string
	expectField string
	gates       StaticConfig
}

func loadFixtures(t *testing.T, dir string) []fixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in testdata/%s: %v", dir, err)
	}
	var out []fixture
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fx := fixture{name: filepath.Base(f), gates: StaticConfig{}}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "#") {
				break
			}
			key, value, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
			switch key {
			case "expect-field":
				fx.expectField = strings.TrimSpace(value)
			case "feature-gates":
				for _, g := range strings.Split(value, ",") {
					fx.gates[strings.TrimSpace(g)] = true
				}
			}
		}
		if fx.json, err = yaml.YAMLToJSON(b); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := decodeJSON(fx.json, &meta); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if meta.APIVersion != "kubevirt.io/v1" || meta.Metadata.Name == "" || (meta.Metadata.Namespace != "" && meta.Metadata.Namespace != "default") {
			t.Errorf("%s: want apiVersion kubevirt.io/v1, a name and no namespace but default", f)
		}
		fx.kind = meta.Kind
		out = append(out, fx)
	}
	return out
}

var fixturePaths = map[string]struct{ resource, mutate, validate string }{
	"VirtualMachineInstance":          {vmiResource, VMIMutatePath, VMIValidatePath},
	"VirtualMachine":                  {vmResource, VMMutatePath, VMValidatePath},
	"VirtualMachineInstanceMigration": {migrationResource, MigrationMutatePath, MigrationCreateValidatePath},
}

// admitFixture creates the fixture as the API server would: schema check,
// mutating webhook, its patch, validating webhook.
func admitFixture(t *testing.T, fx fixture) (patched []byte, resp *admissionv1.AdmissionResponse) {
	t.Helper()
	paths, ok := fixturePaths[fx.kind]
	if !ok {
		t.Fatalf("unknown kind %q", fx.kind)
	}
	var obj any
	if err := decodeJSON(fx.json, &obj); err != nil {
		t.Fatal(err)
	}
	if errs := loadCRDSchema(t, paths.resource).check("", obj); len(errs) > 0 {
		t.Fatalf("the CRD schema refuses the fixture before any webhook:\n  %s", strings.Join(errs, "\n  "))
	}
	srv := testServer(t, fx.gates, Options{})
	_, mut := post(t, srv, request{path: paths.mutate, op: admissionv1.Create, object: fx.json, user: alice})
	if !mut.Allowed {
		t.Fatalf("the mutating webhook denied: %+v", mut.Result)
	}
	patched = applyPatch(t, fx.json, mut.Patch)
	_, resp = post(t, srv, request{path: paths.validate, op: admissionv1.Create, object: patched, user: alice})
	return patched, resp
}

func TestValidFixtures(t *testing.T) {
	fixtures := loadFixtures(t, "valid")
	if len(fixtures) < 10 {
		t.Errorf("only %d valid fixtures", len(fixtures))
	}
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			patched, resp := admitFixture(t, fx)
			if !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
			switch fx.kind {
			case "VirtualMachineInstance":
				var vmi v1.VirtualMachineInstance
				mustDecode(t, patched, &vmi)
				checkVMIDefaults(t, &vmi.Spec)
				if vmi.Status.Phase != v1.Pending || len(vmi.Finalizers) == 0 || vmi.Finalizers[0] != v1.VirtualMachineInstanceFinalizer {
					t.Errorf("phase %q, finalizers %v", vmi.Status.Phase, vmi.Finalizers)
				}
			case "VirtualMachine":
				var before, after v1.VirtualMachine
				mustDecode(t, fx.json, &before)
				mustDecode(t, patched, &after)
				tmpl := after.Spec.Template.Spec
				if tmpl.Domain.Machine == nil || tmpl.Domain.Machine.Type == "" || tmpl.Architecture != "amd64" || tmpl.Domain.Firmware.UUID == "" {
					t.Errorf("template defaults missing: %+v", tmpl.Domain)
				}
				b, _ := before.RunStrategy()
				a, _ := after.RunStrategy()
				if a != b || (before.Spec.Running == nil) != (after.Spec.Running == nil) {
					t.Errorf("run strategy %s became %s", b, a)
				}
			case "VirtualMachineInstanceMigration":
				var m v1.VirtualMachineInstanceMigration
				mustDecode(t, patched, &m)
				if m.Labels[v1.MigrationSelectorLabel] != m.Spec.VMIName || len(m.Finalizers) != 1 {
					t.Errorf("labels %v, finalizers %v", m.Labels, m.Finalizers)
				}
			}
		})
	}
}

// checkVMIDefaults wants what KubeVirt's mutating webhook writes down.
func checkVMIDefaults(t *testing.T, s *v1.VirtualMachineInstanceSpec) {
	t.Helper()
	d := s.Domain
	if d.Machine == nil || d.Machine.Type == "" || d.CPU == nil || d.CPU.Sockets == 0 || d.CPU.Cores == 0 || d.CPU.Threads == 0 ||
		d.Memory == nil || d.Memory.Guest == nil || d.Firmware == nil || d.Firmware.UUID == "" ||
		d.Features == nil || d.Features.ACPI.Enabled == nil || s.TerminationGracePeriodSeconds == nil {
		t.Errorf("defaults missing: %+v", d)
	}
	disks := map[string]bool{}
	for _, disk := range d.Devices.Disks {
		disks[disk.Name] = true
		if _, bus, n := diskTarget(disk); n != 1 || bus == "" {
			t.Errorf("disk %s has no target or bus", disk.Name)
		}
	}
	for _, vol := range s.Volumes {
		if !disks[vol.Name] && vol.MemoryDump == nil {
			t.Errorf("volume %s got no disk", vol.Name)
		}
	}
}

func TestInvalidFixtures(t *testing.T) {
	fixtures := loadFixtures(t, "invalid")
	if len(fixtures) < 30 {
		t.Errorf("only %d invalid fixtures", len(fixtures))
	}
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			if fx.expectField == "" {
				t.Fatal("no # expect-field: header")
			}
			_, resp := admitFixture(t, fx)
			if resp.Allowed {
				t.Fatal("allowed")
			}
			if resp.Result.Code != 422 || resp.Result.Reason != "Invalid" {
				t.Fatalf("want a 422, got %+v", resp.Result)
			}
			if !causeAt(resp, fx.expectField) {
				t.Errorf("no cause at %s: %+v", fx.expectField, resp.Result.Details.Causes)
			}
			for _, c := range resp.Result.Details.Causes {
				t.Logf("%s %s: %s", c.Type, c.Field, c.Message)
			}
		})
	}
}

func mustDecode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := decodeJSON(b, v); err != nil {
		t.Fatal(err)
	}
}
