/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// TestWebhookManifests keeps deploy/webhooks.yaml in step with the handlers.
func TestWebhookManifests(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "webhooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	Register(mux, StaticConfig{}, Options{})
	type webhook struct {
		name     string
		cfg      admissionregistrationv1.WebhookClientConfig
		sides    *admissionregistrationv1.SideEffectClass
		policy   *admissionregistrationv1.FailurePolicyType
		versions []string
		rules    []admissionregistrationv1.RuleWithOperations
	}
	var hooks []webhook
	resources := map[string]bool{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "MutatingWebhookConfiguration":
			var c admissionregistrationv1.MutatingWebhookConfiguration
			if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
				t.Fatal(err)
			}
			for _, w := range c.Webhooks {
				hooks = append(hooks, webhook{w.Name, w.ClientConfig, w.SideEffects, w.FailurePolicy, w.AdmissionReviewVersions, w.Rules})
			}
		case "ValidatingWebhookConfiguration":
			var c admissionregistrationv1.ValidatingWebhookConfiguration
			if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
				t.Fatal(err)
			}
			for _, w := range c.Webhooks {
				hooks = append(hooks, webhook{w.Name, w.ClientConfig, w.SideEffects, w.FailurePolicy, w.AdmissionReviewVersions, w.Rules})
			}
		default:
			t.Fatalf("unexpected document kind %q", head.Kind)
		}
	}
	if len(hooks) != 8 {
		t.Errorf("%d webhooks", len(hooks))
	}
	for _, h := range hooks {
		s := h.cfg.Service
		if s == nil || s.Namespace != "kubevirt" || s.Name != "virt-api" || s.Path == nil {
			t.Errorf("%s: service %+v", h.name, s)
			continue
		}
		if _, pattern := mux.Handler(&http.Request{Method: http.MethodPost, URL: mustURL(*s.Path)}); pattern != *s.Path {
			t.Errorf("%s: path %s is not served", h.name, *s.Path)
		}
		// The eviction webhook marks the VMI to evacuate, except on a dry run.
		sides := admissionregistrationv1.SideEffectClassNone
		if *s.Path == EvictionPath {
			sides = admissionregistrationv1.SideEffectClassNoneOnDryRun
		}
		if h.sides == nil || *h.sides != sides || h.policy == nil || *h.policy != admissionregistrationv1.Fail {
			t.Errorf("%s: sideEffects %v, failurePolicy %v", h.name, h.sides, h.policy)
		}
		if len(h.versions) != 1 || h.versions[0] != "v1" {
			t.Errorf("%s: admissionReviewVersions %v", h.name, h.versions)
		}
		for _, r := range h.rules {
			group := "kubevirt.io"
			if *s.Path == EvictionPath {
				group = ""
			}
			if len(r.APIGroups) != 1 || r.APIGroups[0] != group || len(r.APIVersions) != 1 || r.APIVersions[0] != "v1" {
				t.Errorf("%s: rule %+v", h.name, r)
			}
			for _, res := range r.Resources {
				resources[res] = true
			}
		}
	}
	for _, res := range []string{"virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations",
		"virtualmachines/status", "virtualmachineinstances/status", "virtualmachineinstancemigrations/status", "pods/eviction"} {
		if !resources[res] {
			t.Errorf("no webhook for %s", res)
		}
	}
}
