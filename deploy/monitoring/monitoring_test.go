// Package monitoring_test checks deploy/monitoring: the rules and their unit tests with promtool,
// the scrape configuration with promtool, the PrometheusRule against the rule file it wraps, and
// the metrics Service against the components' pod templates.
package monitoring_test

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite prometheusrule.yaml from kubevirt-rules.yaml (make generate)")

// promtool is the promtool make monitoring-tools builds (it understands the Kubernetes service
// discovery that prometheus.yaml uses).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "_tools", "promtool"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("_tools/promtool missing: make test builds it")
		}
		t.Skip("_tools/promtool not built (make monitoring-tools)")
	}
	return p
}

func TestPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "kubevirt-rules.yaml"},
		{"test", "rules", "kubevirt-rules_test.yaml"},
		{"check", "config", "prometheus.yaml"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// TestEveryAlertHasAUnitTest: each alert in the rule file is the subject of at least one
// alert_rule_test, once firing (exp_alerts not empty).
func TestEveryAlertHasAUnitTest(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert string }
		}
	}
	readYAML(t, "kubevirt-rules.yaml", &rules)
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				AlertName string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		}
	}
	readYAML(t, "kubevirt-rules_test.yaml", &tests)
	firing := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			firing[a.AlertName] = firing[a.AlertName] || len(a.ExpAlerts) > 0
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !firing[r.Alert] {
				t.Errorf("alert %s has no unit test in which it fires", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts in kubevirt-rules.yaml")
	}
}

// TestPrometheusRuleWrapsTheRules: prometheusrule.yaml carries exactly the groups of
// kubevirt-rules.yaml (go test -update rewrites it).
func TestPrometheusRuleWrapsTheRules(t *testing.T) {
	raw, err := os.ReadFile("kubevirt-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var groups struct {
		Groups []any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &groups); err != nil {
		t.Fatal(err)
	}
	rule := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name": "prometheus-kubevirt-rules", "namespace": "kubevirt",
			"labels": map[string]any{"prometheus.kubevirt.io": "true"},
		},
		"spec": map[string]any{"groups": groups.Groups},
	}
	body, err := yaml.Marshal(rule)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte("# Generated from kubevirt-rules.yaml by `make generate`: the same groups as a prometheus-operator\n# PrometheusRule.\n"), body...)
	if *update {
		if err := os.WriteFile("prometheusrule.yaml", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("prometheusrule.yaml differs from kubevirt-rules.yaml; run make generate")
	}
}

// TestMetricsServiceSelectsEveryComponent: the Service of servicemonitor.yaml selects the pods of
// virt-api, virt-controller and virt-handler, and each of them serves its port with the
// annotations the scrape configuration reads.
func TestMetricsServiceSelectsEveryComponent(t *testing.T) {
	var svc *corev1.Service
	for _, doc := range documents(t, "servicemonitor.yaml") {
		var meta struct{ Kind string }
		_ = yaml.Unmarshal(doc, &meta)
		if meta.Kind == "Service" {
			svc = &corev1.Service{}
			if err := yaml.UnmarshalStrict(doc, svc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if svc == nil || len(svc.Spec.Ports) != 1 {
		t.Fatal("servicemonitor.yaml has no Service with one port")
	}
	port := svc.Spec.Ports[0].TargetPort.IntValue()
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	for file, kind := range map[string]string{"virt-api.yaml": "Deployment", "virt-controller.yaml": "Deployment", "virt-handler.yaml": "DaemonSet"} {
		var tmpl *corev1.PodTemplateSpec
		for _, doc := range documents(t, filepath.Join("..", file)) {
			var meta struct{ Kind string }
			_ = yaml.Unmarshal(doc, &meta)
			switch {
			case meta.Kind != kind:
			case kind == "Deployment":
				var d appsv1.Deployment
				if err := yaml.Unmarshal(doc, &d); err != nil {
					t.Fatal(err)
				}
				tmpl = &d.Spec.Template
			default:
				var d appsv1.DaemonSet
				if err := yaml.Unmarshal(doc, &d); err != nil {
					t.Fatal(err)
				}
				tmpl = &d.Spec.Template
			}
		}
		if tmpl == nil {
			t.Errorf("%s: no %s", file, kind)
			continue
		}
		if !sel.Matches(labels.Set(tmpl.Labels)) {
			t.Errorf("%s: the metrics Service does not select its pods (labels %v)", file, tmpl.Labels)
		}
		a := tmpl.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/scheme"] != "https" || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("%s: prometheus.io annotations %v", file, a)
		}
		served := false
		for _, c := range tmpl.Spec.Containers {
			for _, p := range c.Ports {
				served = served || int(p.ContainerPort) == port
			}
		}
		if !served || a["prometheus.io/port"] != svc.Spec.Ports[0].TargetPort.String() {
			t.Errorf("%s: no container port %d, or prometheus.io/port %q differs", file, port, a["prometheus.io/port"])
		}
	}
}

func readYAML(t *testing.T, file string, into any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if reflect.ValueOf(into).Elem().IsZero() {
		t.Fatalf("%s: nothing read", file)
	}
}

func documents(t *testing.T, file string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
	return docs
}
