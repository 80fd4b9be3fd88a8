package install

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

func TestRenderMovesTheInstallationToTheCRsNamespaceRegistryAndTag(t *testing.T) {
	bundle := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	objs, err := Render(Options{Namespace: "virt", Registry: "registry.example:5000/qv", Tag: "v0.2.0",
		Bundle: bundle, NodeCertLifetime: 2 * time.Minute, PullPolicy: "Always", PullSecrets: []string{"pull"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetLabels()[ManagedByLabel] != ManagedByValue || o.GetLabels()[VersionLabel] != "v0.2.0" {
			t.Errorf("%s %s: labels %v, want managed-by and version", o.GetKind(), o.GetName(), o.GetLabels())
		}
		if ns := o.GetNamespace(); ns != "" && ns != "virt" && ns != "kube-system" {
			t.Errorf("%s %s: namespace %s, want virt", o.GetKind(), o.GetName(), ns)
		}
	}
	ctrl := find(t, objs, "Deployment", "virt-controller")
	cs, _, _ := unstructured.NestedSlice(ctrl.Object, "spec", "template", "spec", "containers")
	c := cs[0].(map[string]any)
	if c["image"] != "registry.example:5000/qv/virt-controller:v0.2.0" || c["imagePullPolicy"] != "Always" {
		t.Errorf("virt-controller image %v, policy %v", c["image"], c["imagePullPolicy"])
	}
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	for _, want := range []string{"--launcher-image=registry.example:5000/qv/virt-launcher:v0.2.0", "--node-cert-lifetime=2m0s"} {
		if !slices.Contains(args, want) {
			t.Errorf("virt-controller args %v lack %s", args, want)
		}
	}
	secrets, _, _ := unstructured.NestedSlice(ctrl.Object, "spec", "template", "spec", "imagePullSecrets")
	if len(secrets) != 1 || secrets[0].(map[string]any)["name"] != "pull" {
		t.Errorf("imagePullSecrets %v", secrets)
	}
	want := base64.StdEncoding.EncodeToString(bundle)
	hooks, _, _ := unstructured.NestedSlice(find(t, objs, "ValidatingWebhookConfiguration", "virt-api-validator").Object, "webhooks")
	for _, h := range hooks {
		cc := h.(map[string]any)["clientConfig"].(map[string]any)
		if cc["caBundle"] != want || cc["service"].(map[string]any)["namespace"] != "virt" {
			t.Errorf("webhook %v: clientConfig %v", h.(map[string]any)["name"], cc)
		}
	}
	if got, _, _ := unstructured.NestedString(find(t, objs, "APIService", "v1.subresources.kubevirt.io").Object, "spec", "caBundle"); got != want {
		t.Errorf("APIService caBundle %q", got)
	}
	crb := find(t, objs, "ClusterRoleBinding", "kubevirt-controller")
	subjects, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
	if ns := subjects[0].(map[string]any)["namespace"]; ns != "virt" {
		t.Errorf("ClusterRoleBinding subject namespace %v", ns)
	}
}

func TestImagesKeepWhatIsNotQvirts(t *testing.T) {
	for _, c := range []struct{ in, reg, tag, want string }{
		{"qvirt/virt-api:v0.1.0", "", "", "qvirt/virt-api:v0.1.0"},
		{"qvirt/virt-api:v0.1.0", "r:5000", "", "r:5000/virt-api:v0.1.0"},
		{"busybox:1", "r:5000", "v2", "busybox:1"},
	} {
		if got := Image(c.in, c.reg, c.tag); got != c.want {
			t.Errorf("Image(%s, %s, %s) = %s, want %s", c.in, c.reg, c.tag, got, c.want)
		}
	}
	for _, c := range []struct{ in, reg, tag string }{
		{"qvirt/virt-operator:v0.1.0", "qvirt", "v0.1.0"},
		{"localhost:5000/x/virt-operator:v3", "localhost:5000/x", "v3"},
		{"localhost:5000/virt-operator", "localhost:5000", ""},
	} {
		if reg, tag := RegistryAndTag(c.in); reg != c.reg || tag != c.tag {
			t.Errorf("RegistryAndTag(%s) = %s, %s", c.in, reg, tag)
		}
	}
	if strings.Contains(Image("qvirt/virt-api", "r", "t"), "::") {
		t.Error("untagged image")
	}
}
