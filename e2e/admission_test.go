package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/qvirt/qvirt/e2e/stack"
	"github.com/qvirt/qvirt/e2e/testenv"
)

var resources = map[string]string{
	"VirtualMachine":                  "virtualmachines",
	"VirtualMachineInstance":          "virtualmachineinstances",
	"VirtualMachineInstanceMigration": "virtualmachineinstancemigrations",
}

// header reads "# key: value" lines at the top of a fixture.
func header(t *testing.T, path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(line, "#")), key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func fixtures(t *testing.T, kind string) []string {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(t), "control", "webhooks", "testdata", kind, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s fixtures: %v", kind, err)
	}
	return files
}

func object(t *testing.T, path string) *unstructured.Unstructured {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	if u.GetNamespace() == "" {
		u.SetNamespace("default")
	}
	return u
}

// TestAdmissionOnARealAPIServer applies the webhook fixtures through the kube-apiserver: every
// invalid manifest is refused with 422 naming its field, every valid one is stored with the
// defaults visible.
func TestAdmissionOnARealAPIServer(t *testing.T) {
	s := controlPlane(t)
	dyn, err := dynamic.NewForConfig(s.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	invalid := fixtures(t, "invalid")
	if len(invalid) < 30 {
		t.Errorf("only %d invalid fixtures", len(invalid))
	}
	for _, path := range invalid {
		name := filepath.Base(path)
		want := header(t, path, "expect-field")
		if want == "" {
			t.Errorf("%s: no expect-field header", name)
			continue
		}
		obj := object(t, path)
		gvr := schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: resources[obj.GetKind()]}
		_, err := dyn.Resource(gvr).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{})
		var se *apierrors.StatusError
		if !errors.As(err, &se) {
			t.Errorf("%s: accepted (err %v)", name, err)
			continue
		}
		st := se.ErrStatus
		found := false
		if st.Details != nil {
			for _, c := range st.Details.Causes {
				found = found || c.Field == want
			}
		}
		if st.Code != 422 || !found {
			t.Errorf("%s: code %d, causes %+v; want 422 naming %s", name, st.Code, st.Details, want)
		}
		// kubectl apply, as a user would: refused, and the message names the field.
		if out, err := kubectl(t, s, "apply", "-f", path); err == nil || !strings.Contains(out, trimIndex(want)) {
			t.Errorf("%s: kubectl apply: %v: %s", name, err, out)
		}
	}

	enableGates(t, s, "HostDisk")
	valid := fixtures(t, "valid")
	if len(valid) < 10 {
		t.Errorf("only %d valid fixtures", len(valid))
	}
	for _, path := range valid {
		name := filepath.Base(path)
		obj := object(t, path)
		if obj.GetKind() == "VirtualMachineInstanceMigration" {
			// Valid as a manifest, but its VMI does not exist here: the webhook looks it up.
			vmi, _, _ := unstructured.NestedString(obj.Object, "spec", "vmiName")
			want := `the VMI "` + obj.GetNamespace() + "/" + vmi + `" does not exist`
			if out, err := kubectl(t, s, "create", "-f", path); err == nil || !strings.Contains(out, want) {
				t.Errorf("%s: kubectl create: %v: %s; want it refused: %s", name, err, out, want)
			}
			continue
		}
		var out string
		// The gate reaches virt-api through its watch of the KubeVirt CR: allow it a moment.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			if out, err = kubectl(t, s, "apply", "-f", path); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		got, err := kubectl(t, s, "get", "-o", "json", "-n", obj.GetNamespace(), strings.ToLower(obj.GetKind()), obj.GetName())
		if err != nil {
			t.Errorf("%s: %v %s", name, err, out)
			continue
		}
		checkDefaults(t, name, obj.GetKind(), got)
	}
}

// trimIndex keeps the part of a field path kubectl prints verbatim.
func trimIndex(p string) string {
	if i := strings.LastIndex(p, "."); i > 0 {
		return p[i+1:]
	}
	return p
}

func checkDefaults(t *testing.T, name, kind, js string) {
	var o map[string]any
	if err := json.Unmarshal([]byte(js), &o); err != nil {
		t.Fatal(err)
	}
	get := func(path ...string) any {
		var cur any = o
		for _, p := range path {
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[p]
		}
		return cur
	}
	switch kind {
	case "VirtualMachineInstance":
		if get("spec", "domain", "machine", "type") == nil || get("spec", "domain", "firmware", "uuid") == nil || get("spec", "domain", "features", "acpi") == nil {
			t.Errorf("%s: VMI defaults missing: %v", name, get("spec", "domain"))
		}
		if fin, _ := get("metadata", "finalizers").([]any); len(fin) == 0 {
			t.Errorf("%s: no finalizer", name)
		}
	case "VirtualMachine":
		if get("spec", "template", "spec", "domain", "machine", "type") == nil {
			t.Errorf("%s: VM template defaults missing: %v", name, get("spec", "template", "spec", "domain"))
		}
	case "VirtualMachineInstanceMigration":
		if l, _ := get("metadata", "labels").(map[string]any); l["kubevirt.io/vmi-name"] == nil {
			t.Errorf("%s: migration label missing: %v", name, l)
		}
	}
}

// enableGates applies a KubeVirt CR in the install namespace with the given feature gates.
func enableGates(t *testing.T, s *stack.Stack, gates ...string) {
	cr := `apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: ` + stack.Namespace + `}
spec:
  configuration:
    developerConfiguration:
      useEmulation: true
      featureGates: [` + strings.Join(gates, ", ") + `]
`
	f := filepath.Join(t.TempDir(), "kv.yaml")
	if err := os.WriteFile(f, []byte(cr), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, s, "apply", "-f", f); err != nil {
		t.Fatalf("%v %s", err, out)
	}
}
