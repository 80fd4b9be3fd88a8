// Package deploy_test checks the manifests in deploy/: statically (every object a workload names is
// declared, every file it is told to read is mounted, every Service selects pods with the port it
// targets) and against a real kube-apiserver (server-side dry-run of every manifest, and Pod Security
// admission of every workload's pods).
package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

// manifestFiles are the manifests an installer applies (deploy/*.yaml) and the examples; the CRDs
// are applied for real before the dry-run.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"*.yaml", "examples/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		// operator.yaml repeats namespace.yaml, the CRDs and virt-operator.yaml (operator_test.go).
		files = append(files, slices.DeleteFunc(m, func(f string) bool { return f == operatorManifest })...)
	}
	if len(files) == 0 {
		t.Fatal("no manifests found")
	}
	slices.Sort(files)
	return files
}

// object is one YAML document of a manifest.
type object struct {
	file string
	metav1.TypeMeta
	metav1.ObjectMeta
	raw []byte
}

func (o object) String() string {
	if o.Namespace != "" {
		return fmt.Sprintf("%s %s/%s (%s)", o.Kind, o.Namespace, o.Name, o.file)
	}
	return fmt.Sprintf("%s %s (%s)", o.Kind, o.Name, o.file)
}

// decode unmarshals o strictly: an unknown field is an error.
func (o object) decode(t *testing.T, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.raw, into); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
}

func readObjects(t *testing.T, files []string) []object {
	t.Helper()
	var out []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			o := object{file: f, raw: doc}
			var meta struct {
				metav1.TypeMeta `json:",inline"`
				Metadata        metav1.ObjectMeta `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if meta.Kind == "" { // comments only
				continue
			}
			o.TypeMeta, o.ObjectMeta = meta.TypeMeta, meta.Metadata
			out = append(out, o)
		}
	}
	return out
}

// workload is a Deployment or a DaemonSet.
type workload struct {
	object
	template corev1.PodTemplateSpec
}

func workloads(t *testing.T, objs []object) []workload {
	t.Helper()
	var out []workload
	for _, o := range objs {
		switch o.Kind {
		case "Deployment":
			var d appsv1.Deployment
			o.decode(t, &d)
			out = append(out, workload{o, d.Spec.Template})
		case "DaemonSet":
			var d appsv1.DaemonSet
			o.decode(t, &d)
			out = append(out, workload{o, d.Spec.Template})
		}
	}
	return out
}

// declared holds the Secrets and ConfigMaps an installer provides: key sets by "namespace/name".
type declared map[string]map[string]bool

// readmeRow is a row of README.md's table: | Secret | `name` | `key`, `key` | ... |
var readmeRow = regexp.MustCompile("^\\|\\s*(Secret|ConfigMap)\\s*\\|([^|]*)\\|([^|]*)\\|")

var backticked = regexp.MustCompile("`([^`]+)`")

// installerObjects returns the Secrets and ConfigMaps that README.md tells an installer to create
// (in namespace kubevirt) and those the manifests themselves hold, by kind.
func installerObjects(t *testing.T, objs []object) map[string]declared {
	t.Helper()
	out := map[string]declared{"Secret": {}, "ConfigMap": {}}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		m := readmeRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names := backticked.FindAllStringSubmatch(m[2], -1)
		if len(names) != 1 {
			t.Fatalf("README.md: want one `name` in %q", line)
		}
		keys := map[string]bool{}
		for _, k := range backticked.FindAllStringSubmatch(m[3], -1) {
			keys[k[1]] = true
		}
		if len(keys) == 0 {
			t.Fatalf("README.md: no `key` in %q", line)
		}
		out[m[1]]["kubevirt/"+names[0][1]] = keys
	}
	for _, o := range objs {
		if o.Kind != "Secret" && o.Kind != "ConfigMap" {
			continue
		}
		var data struct {
			Data       map[string]string `json:"data"`
			StringData map[string]string `json:"stringData"`
			BinaryData map[string]string `json:"binaryData"`
		}
		if err := yaml.Unmarshal(o.raw, &data); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
		keys := map[string]bool{}
		for _, m := range []map[string]string{data.Data, data.StringData, data.BinaryData} {
			for k := range m {
				keys[k] = true
			}
		}
		out[o.Kind][o.Namespace+"/"+o.Name] = keys
	}
	if len(out["Secret"])+len(out["ConfigMap"]) == 0 {
		t.Fatal("README.md declares no Secret or ConfigMap")
	}
	return out
}

// TestReferences checks, without a cluster, that the workloads name only ServiceAccounts, Secrets and
// ConfigMaps (and their keys) that the manifests or README.md declare; that each --*-file argument
// names a file one of the container's mounts provides; that every flag exists in the component's
// main.go; that each qvirt image has a Dockerfile; and that Services, the PodDisruptionBudgets, the
// webhooks and the APIService reach the pods and ports they mean.
func TestReferences(t *testing.T) {
	objs := readObjects(t, manifestFiles(t))
	wls := workloads(t, objs)
	if len(wls) == 0 {
		t.Fatal("no Deployment or DaemonSet in deploy/")
	}
	serviceAccounts := map[string]bool{}
	for _, o := range objs {
		if o.Kind == "ServiceAccount" {
			serviceAccounts[o.Namespace+"/"+o.Name] = true
		}
	}
	known := installerObjects(t, objs)

	for _, w := range wls {
		t.Run(w.Kind+"/"+w.Name, func(t *testing.T) {
			spec := w.template.Spec
			ns := w.Namespace
			if spec.ServiceAccountName == "" {
				t.Error("no serviceAccountName")
			} else if !serviceAccounts[ns+"/"+spec.ServiceAccountName] {
				t.Errorf("ServiceAccount %s/%s is declared nowhere", ns, spec.ServiceAccountName)
			}
			// ref checks one reference to a Secret or ConfigMap key ("" for the whole object);
			// false means the object itself is unknown.
			ref := func(kind, name, key, where string) bool {
				keys, ok := known[kind][ns+"/"+name]
				switch {
				case !ok:
					t.Errorf("%s: %s %s/%s is declared neither in deploy/ nor in README.md", where, kind, ns, name)
				case key != "" && !keys[key]:
					t.Errorf("%s: %s %s/%s has no key %q (README.md)", where, kind, ns, name, key)
				}
				return ok
			}
			// files lists, by volume, the file names it provides (nil: not a Secret or ConfigMap).
			files := map[string][]string{}
			project := func(vol, kind, name string, items []corev1.KeyToPath) {
				if len(items) == 0 {
					ref(kind, name, "", "volume "+vol)
					for k := range known[kind][ns+"/"+name] {
						files[vol] = append(files[vol], k)
					}
					return
				}
				for _, it := range items {
					if !ref(kind, name, it.Key, "volume "+vol) {
						return
					}
					files[vol] = append(files[vol], it.Path)
				}
			}
			for _, v := range spec.Volumes {
				switch {
				case v.Secret != nil:
					project(v.Name, "Secret", v.Secret.SecretName, v.Secret.Items)
				case v.ConfigMap != nil:
					project(v.Name, "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items)
				case v.Projected != nil:
					for _, s := range v.Projected.Sources {
						if s.Secret != nil {
							project(v.Name, "Secret", s.Secret.Name, s.Secret.Items)
						}
						if s.ConfigMap != nil {
							project(v.Name, "ConfigMap", s.ConfigMap.Name, s.ConfigMap.Items)
						}
					}
				}
			}
			for _, s := range spec.ImagePullSecrets {
				ref("Secret", s.Name, "", "imagePullSecrets")
			}
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				where := "container " + c.Name
				for _, e := range c.EnvFrom {
					if e.SecretRef != nil {
						ref("Secret", e.SecretRef.Name, "", where)
					}
					if e.ConfigMapRef != nil {
						ref("ConfigMap", e.ConfigMapRef.Name, "", where)
					}
				}
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
						ref("Secret", e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key, where)
					}
					if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
						ref("ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key, where)
					}
				}
				checkFileArgs(t, c, files)
				checkFlags(t, c)
				checkImage(t, c.Image)
			}
		})
	}

	for _, o := range objs {
		switch o.Kind {
		case "Service":
			var s corev1.Service
			o.decode(t, &s)
			w := selected(t, o, wls, s.Spec.Selector)
			for _, p := range s.Spec.Ports {
				if w != nil && !hasPort(w.template.Spec, p.TargetPort, p.Port) {
					t.Errorf("%s: port %s targets %s, which %s does not expose", o, p.Name, p.TargetPort.String(), w.object)
				}
			}
		case "PodDisruptionBudget":
			var pdb policyv1.PodDisruptionBudget
			o.decode(t, &pdb)
			if pdb.Spec.Selector == nil {
				t.Errorf("%s: no selector", o)
			} else {
				selected(t, o, wls, pdb.Spec.Selector.MatchLabels)
			}
		case "MutatingWebhookConfiguration":
			var c admissionregistrationv1.MutatingWebhookConfiguration
			o.decode(t, &c)
			for _, h := range c.Webhooks {
				checkServiceRef(t, o, objs, h.ClientConfig.Service.Namespace, h.ClientConfig.Service.Name, h.ClientConfig.Service.Port)
			}
		case "ValidatingWebhookConfiguration":
			var c admissionregistrationv1.ValidatingWebhookConfiguration
			o.decode(t, &c)
			for _, h := range c.Webhooks {
				checkServiceRef(t, o, objs, h.ClientConfig.Service.Namespace, h.ClientConfig.Service.Name, h.ClientConfig.Service.Port)
			}
		case "APIService":
			var a struct {
				Spec struct {
					Service struct {
						Namespace string `json:"namespace"`
						Name      string `json:"name"`
						Port      *int32 `json:"port"`
					} `json:"service"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(o.raw, &a); err != nil {
				t.Fatalf("%s: %v", o, err)
			}
			checkServiceRef(t, o, objs, a.Spec.Service.Namespace, a.Spec.Service.Name, a.Spec.Service.Port)
		}
	}
}

// fileFlag matches arguments naming a file to read: --tls-cert-file=/etc/x/tls.crt.
var fileFlag = regexp.MustCompile(`^--?([a-z-]+-file)=(.+)$`)

// checkFileArgs requires every --*-file=PATH to be a file that a Secret or ConfigMap volume mounted
// at PATH's directory provides.
func checkFileArgs(t *testing.T, c corev1.Container, files map[string][]string) {
	t.Helper()
	for _, a := range slices.Concat(c.Command, c.Args) {
		m := fileFlag.FindStringSubmatch(a)
		if m == nil {
			continue
		}
		dir, base := path.Split(m[2])
		i := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
			return path.Clean(vm.MountPath) == path.Clean(dir) && vm.SubPath == ""
		})
		switch {
		case i < 0:
			t.Errorf("container %s: --%s=%s: no volume is mounted at %s", c.Name, m[1], m[2], dir)
		case !slices.Contains(files[c.VolumeMounts[i].Name], base):
			t.Errorf("container %s: --%s=%s: volume %s provides %v", c.Name, m[1], m[2], c.VolumeMounts[i].Name, files[c.VolumeMounts[i].Name])
		}
	}
}

// klogFlags are registered by klog.InitFlags, not in main.go.
var klogFlags = []string{"v", "vmodule", "logtostderr", "alsologtostderr", "log_file", "stderrthreshold"}

// checkFlags requires every --flag of a qvirt component to be registered in its cmd/<x>/main.go: a
// misspelt flag makes the binary exit at once, which no API server check can see.
func checkFlags(t *testing.T, c corev1.Container) {
	t.Helper()
	component, ok := qvirtComponent(c.Image)
	if !ok {
		return
	}
	src, err := os.ReadFile(filepath.Join("..", "cmd", component, "main.go"))
	if err != nil {
		t.Errorf("container %s: %v", c.Name, err)
		return
	}
	for _, a := range c.Args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !slices.Contains(klogFlags, name) && !bytes.Contains(src, []byte(`"`+name+`"`)) {
			t.Errorf("container %s: flag --%s is not registered in cmd/%s/main.go", c.Name, name, component)
		}
		if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(v, "qvirt/") {
			checkImage(t, v)
		}
	}
}

// qvirtComponent returns X of the image qvirt/X:tag.
func qvirtComponent(image string) (string, bool) {
	rest, ok := strings.CutPrefix(image, "qvirt/")
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, ":")
	return name, true
}

// checkImage requires a qvirt image to have deploy/images/<x>/Dockerfile building ./cmd/<x>.
func checkImage(t *testing.T, image string) {
	t.Helper()
	component, ok := qvirtComponent(image)
	if !ok {
		return
	}
	b, err := os.ReadFile(filepath.Join("images", component, "Dockerfile"))
	if err != nil {
		t.Errorf("image %s: %v", image, err)
		return
	}
	if !bytes.Contains(b, []byte("./cmd/"+component)) {
		t.Errorf("image %s: images/%s/Dockerfile does not build ./cmd/%s", image, component, component)
	}
}

// selected returns the one workload in o's namespace whose pods sel matches.
func selected(t *testing.T, o object, wls []workload, sel map[string]string) *workload {
	t.Helper()
	if len(sel) == 0 {
		t.Errorf("%s: empty selector", o)
		return nil
	}
	var found []*workload
	for i := range wls {
		if wls[i].Namespace == o.Namespace && labels.SelectorFromSet(sel).Matches(labels.Set(wls[i].template.Labels)) {
			found = append(found, &wls[i])
		}
	}
	if len(found) != 1 {
		t.Errorf("%s: selector %v matches %d workloads, want 1", o, sel, len(found))
		return nil
	}
	return found[0]
}

// hasPort reports whether a container of spec exposes target (a port name or number; unset means
// the Service port).
func hasPort(spec corev1.PodSpec, target intstr.IntOrString, servicePort int32) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			switch {
			case target.Type == intstr.String && target.StrVal != "":
				if p.Name == target.StrVal {
					return true
				}
			case target.Type == intstr.Int && target.IntVal != 0:
				if p.ContainerPort == target.IntVal {
					return true
				}
			default:
				if p.ContainerPort == servicePort {
					return true
				}
			}
		}
	}
	return false
}

func checkServiceRef(t *testing.T, o object, objs []object, ns, name string, port *int32) {
	t.Helper()
	want := int32(443)
	if port != nil {
		want = *port
	}
	for _, s := range objs {
		if s.Kind != "Service" || s.Namespace != ns || s.Name != name {
			continue
		}
		var svc corev1.Service
		s.decode(t, &svc)
		for _, p := range svc.Spec.Ports {
			if p.Port == want {
				return
			}
		}
		t.Errorf("%s: Service %s/%s has no port %d", o, ns, name, want)
		return
	}
	t.Errorf("%s: Service %s/%s is declared nowhere", o, ns, name)
}

// admissionConfig makes the API server enforce the "restricted" Pod Security level wherever a
// namespace does not say otherwise, as hardened clusters do.
const admissionConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: restricted
      enforce-version: latest
    exemptions: {}
`

// restrictedNamespace holds dry-run pods checked against the "restricted" level.
const restrictedNamespace = "qvirt-restricted"

// TestServerDryRun starts a real control plane, installs the namespace and the CRDs, and requires a
// server-side dry-run apply of every manifest (the examples included) to succeed. The webhook
// configurations are only dry-run, so the example VM is admitted without virt-api. Then it creates
// every workload's pod (dry-run): in its own namespace, and for unprivileged ones also in a namespace
// enforcing the "restricted" Pod Security level.
func TestServerDryRun(t *testing.T) {
	dir := t.TempDir()
	admission := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(admission, []byte(admissionConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	c := controlplane.ForTest(t, controlplane.Options{
		Dir: filepath.Join(dir, "cluster"), ExtraAPIServerFlags: []string{"--admission-control-config-file=" + admission},
	})
	kubectl := func(stdin []byte, args ...string) (string, error) {
		cmd := c.Kubectl(append([]string{"--request-timeout=60s"}, args...)...)
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(stdin []byte, args ...string) {
		t.Helper()
		if out, err := kubectl(stdin, args...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	must(nil, "apply", "--server-side", "-f", "namespace.yaml")
	must(nil, "apply", "--server-side", "-f", "crds")
	must(nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", "crds")

	files := manifestFiles(t)
	t.Run("dry-run", func(t *testing.T) {
		for _, f := range files {
			t.Run(f, func(t *testing.T) {
				out, err := kubectl(nil, "apply", "--server-side", "--dry-run=server", "-f", f)
				if err != nil {
					t.Errorf("kubectl apply --server-side --dry-run=server -f %s: %v\n%s", f, err, out)
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	t.Run("crd-rules", func(t *testing.T) {
		kv := func(strategy string) []byte {
			return fmt.Appendf(nil, `{"apiVersion":"kubevirt.io/v1","kind":"KubeVirt","metadata":{"name":"kubevirt","namespace":"kubevirt"},`+
				`"spec":{"configuration":{"evictionStrategy":%q}}}`, strategy)
		}
		for _, s := range []string{"None", "LiveMigrate", "LiveMigrateIfPossible", "External"} {
			if out, err := kubectl(kv(s), "apply", "--server-side", "--dry-run=server", "-f", "-"); err != nil {
				t.Errorf("evictionStrategy %s refused: %v\n%s", s, err, out)
			}
		}
		out, err := kubectl(kv("Never"), "apply", "--server-side", "--dry-run=server", "-f", "-")
		if want := `supported values: "None", "LiveMigrate", "LiveMigrateIfPossible", "External"`; err == nil || !strings.Contains(out, want) {
			t.Errorf("evictionStrategy Never: want a refusal saying %q, got %v\n%s", want, err, out)
		}
	})

	// Pods need their ServiceAccounts to exist.
	must(nil, "apply", "--server-side", "-f", "rbac.yaml")
	must(nil, "apply", "--server-side", "-f", "virt-operator.yaml")
	wls := workloads(t, readObjects(t, files))
	restricted := fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q,"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`, restrictedNamespace)
	must([]byte(restricted), "apply", "--server-side", "-f", "-")
	var sas []string
	for _, w := range wls {
		if !slices.Contains(sas, w.template.Spec.ServiceAccountName) {
			sas = append(sas, w.template.Spec.ServiceAccountName)
			must(nil, "-n", restrictedNamespace, "create", "serviceaccount", w.template.Spec.ServiceAccountName)
		}
	}
	t.Run("pods", func(t *testing.T) {
		for _, w := range wls {
			t.Run(w.Kind+"/"+w.Name, func(t *testing.T) {
				if out, err := kubectl(podJSON(t, w, w.Namespace), "create", "--dry-run=server", "-f", "-"); err != nil {
					t.Errorf("pod of %s in its namespace: %v\n%s", w.object, err, out)
				}
				out, err := kubectl(podJSON(t, w, restrictedNamespace), "create", "--dry-run=server", "-f", "-")
				switch {
				case !privileged(w.template.Spec) && err != nil:
					t.Errorf("pod of %s does not meet the restricted Pod Security level: %v\n%s", w.object, err, out)
				case privileged(w.template.Spec) && (err == nil || !strings.Contains(out, "violates PodSecurity")):
					// Shows that the level is enforced, so the other checks mean something.
					t.Errorf("privileged pod of %s admitted in namespace %s: %v\n%s", w.object, restrictedNamespace, err, out)
				}
			})
		}
	})
}

func privileged(spec corev1.PodSpec) bool {
	if spec.HostPID || spec.HostNetwork || spec.HostIPC {
		return true
	}
	for _, c := range spec.Containers {
		if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
			return true
		}
	}
	return false
}

// podJSON is a pod of w's template in namespace ns.
func podJSON(t *testing.T, w workload, ns string) []byte {
	t.Helper()
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: w.Name + "-dry-run", Namespace: ns,
			Labels: w.template.Labels, Annotations: w.template.Annotations,
		},
		Spec: w.template.Spec,
	}
	b, err := json.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
