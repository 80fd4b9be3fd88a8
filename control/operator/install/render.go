// Package install renders the objects an installation consists of (deploy/'s component
// manifests, for one namespace, image registry and tag, with the CA bundle in place) and applies
// them with server-side apply, so that whatever anyone else changes in a field qvirt sets is put
// back on the next apply.
package install

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/qvirt/qvirt/deploy"
)

// Labels on everything the operator installs, as KubeVirt's operator sets them; the operator
// watches and uninstalls by ManagedByLabel.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "virt-operator"
	VersionLabel   = "app.kubernetes.io/version"
	// manifestNamespace and manifestRegistry are what deploy/'s manifests are written for.
	manifestNamespace = "kubevirt"
	manifestRegistry  = "qvirt"
)

// Options say what to render.
type Options struct {
	Namespace string
	// Registry and Tag name each component's image: <Registry>/<component>:<Tag>.
	Registry, Tag string
	// Bundle is the CA bundle (PEM) of the webhooks' and the APIService's server.
	Bundle []byte
	// PullPolicy (when set) and PullSecrets go on every component's pods.
	PullPolicy  string
	PullSecrets []string
	// NodeCertLifetime bounds node agents' serving certificates, which virt-controller signs.
	NodeCertLifetime time.Duration
}

// Render is every object of the installation, in the order to apply them.
func Render(o Options) ([]*unstructured.Unstructured, error) {
	return render(deploy.Components, deploy.ComponentFiles, o)
}

func render(fsys fs.FS, files []string, o Options) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		objs, err := decode(f, b)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			if err := customize(obj, o); err != nil {
				return nil, fmt.Errorf("%s: %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
			out = append(out, obj)
		}
	}
	return out, nil
}

func decode(name string, b []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if m == nil {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// customize moves obj to the namespace, registry and tag of o, labels it, and fills in the CA
// bundle and the node certificate lifetime.
func customize(obj *unstructured.Unstructured, o Options) error {
	relocate(obj.Object, o.Namespace)
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[ManagedByLabel], l[VersionLabel] = ManagedByValue, o.Tag
	obj.SetLabels(l)

	bundle := base64.StdEncoding.EncodeToString(o.Bundle)
	switch obj.GetKind() {
	case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		for _, h := range hooks {
			if cc, ok := h.(map[string]any)["clientConfig"].(map[string]any); ok && len(o.Bundle) > 0 {
				cc["caBundle"] = bundle
			}
		}
		return unstructured.SetNestedSlice(obj.Object, hooks, "webhooks")
	case "APIService":
		if len(o.Bundle) > 0 {
			return unstructured.SetNestedField(obj.Object, bundle, "spec", "caBundle")
		}
	case "Deployment", "DaemonSet":
		return customizePods(obj, o)
	}
	return nil
}

// customizePods points the pod template's images at o's registry and tag, labels the pods with
// the version (so a new version rolls them), and bounds virt-controller's node certificates.
func customizePods(obj *unstructured.Unstructured, o Options) error {
	tl, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "labels")
	if tl == nil {
		tl = map[string]string{}
	}
	tl[VersionLabel] = o.Tag
	if err := unstructured.SetNestedStringMap(obj.Object, tl, "spec", "template", "metadata", "labels"); err != nil {
		return err
	}
	containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	for _, c := range containers {
		cm := c.(map[string]any)
		if img, ok := cm["image"].(string); ok {
			cm["image"] = Image(img, o.Registry, o.Tag)
		}
		if o.PullPolicy != "" {
			cm["imagePullPolicy"] = o.PullPolicy
		}
		args, _ := cm["args"].([]any)
		for i, a := range args {
			s, _ := a.(string)
			if v, ok := strings.CutPrefix(s, "--launcher-image="); ok {
				args[i] = "--launcher-image=" + Image(v, o.Registry, o.Tag)
			}
		}
		if cm["name"] == "virt-controller" && o.NodeCertLifetime > 0 {
			args = append(args, "--node-cert-lifetime="+o.NodeCertLifetime.String())
		}
		if args != nil {
			cm["args"] = args
		}
	}
	if len(o.PullSecrets) > 0 {
		refs := make([]any, 0, len(o.PullSecrets))
		for _, n := range o.PullSecrets {
			refs = append(refs, map[string]any{"name": n})
		}
		if err := unstructured.SetNestedSlice(obj.Object, refs, "spec", "template", "spec", "imagePullSecrets"); err != nil {
			return err
		}
	}
	return unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
}

// Image is a manifest's image (qvirt/<component>:<tag>) moved to registry and tag; an empty
// registry or tag keeps the manifest's.
func Image(image, registry, tag string) string {
	repo, _, _ := strings.Cut(image, ":")
	name, ok := strings.CutPrefix(repo, manifestRegistry+"/")
	if !ok {
		return image
	}
	if registry == "" {
		registry = manifestRegistry
	}
	if tag == "" {
		_, tag, _ = strings.Cut(image, ":")
	}
	return registry + "/" + name + ":" + tag
}

// RegistryAndTag splits an image of the operator's (<registry>/virt-operator:<tag>) into the
// registry and tag its components come from by default.
func RegistryAndTag(image string) (registry, tag string) {
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo, tag = repo[:i], repo[i+1:]
	}
	if i := strings.LastIndex(repo, "/"); i >= 0 {
		return repo[:i], tag
	}
	return "", tag
}

// relocate rewrites every "namespace: kubevirt" in v (metadata, Service references, RBAC
// subjects) to ns.
func relocate(v any, ns string) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && k == "namespace" && s == manifestNamespace {
				t[k] = ns
				continue
			}
			relocate(x, ns)
		}
	case []any:
		for _, x := range t {
			relocate(x, ns)
		}
	}
}
