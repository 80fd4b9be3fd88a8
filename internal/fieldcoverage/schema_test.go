/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package fieldcoverage

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// schema is the part of a structural OpenAPI schema the walk needs.
type schema struct {
	Type                 string             `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Required             []string           `json:"required"`
	IntOrString          bool               `json:"x-kubernetes-int-or-string"`
	PreserveUnknown      bool               `json:"x-kubernetes-preserve-unknown-fields"`
}

// mapValues is the schema of a map's values, or nil when s is no map.
func (s *schema) mapValues() *schema {
	if len(s.AdditionalProperties) == 0 || s.AdditionalProperties[0] != '{' {
		return nil
	}
	v := &schema{}
	if err := json.Unmarshal(s.AdditionalProperties, v); err != nil {
		return nil
	}
	return v
}

// loadSchema reads the v1 schema of deploy/crds/kubevirt.io_<plural>.yaml, whole and as raw
// JSON for comparisons.
func loadSchema(t *testing.T, plural string) (*schema, map[string]any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "crds", "kubevirt.io_"+plural+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema json.RawMessage `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != "v1" {
			continue
		}
		s, raw := &schema{}, map[string]any{}
		if err := json.Unmarshal(v.Schema.OpenAPIV3Schema, s); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(v.Schema.OpenAPIV3Schema, &raw); err != nil {
			t.Fatal(err)
		}
		return s, raw
	}
	t.Fatalf("%s: no v1 schema", plural)
	return nil, nil
}

// leaf is one field a user can set: a scalar, a map, an object without properties (whose
// presence is the setting, like bridge: {}) or the item of a list of scalars.
type leaf struct {
	// path is dotted, with [] for "any element": spec.volumes[].name.
	path string
	segs []string
	s    *schema
	// required in its parent object: then every valid parent has it, and the test compares
	// two of its values instead of its absence and presence.
	required bool
}

// leaves returns the leaves under s, whose own path is segs, in a stable order.
func leaves(segs []string, s *schema, required bool) []leaf {
	switch {
	case s.Type == "array" && s.Items != nil:
		return leaves(append(slices.Clone(segs), "[]"), s.Items, false)
	case s.Type == "object" && len(s.Properties) > 0:
		var out []leaf
		keys := make([]string, 0, len(s.Properties))
		for k := range s.Properties {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			out = append(out, leaves(append(slices.Clone(segs), k), s.Properties[k], slices.Contains(s.Required, k))...)
		}
		return out
	}
	return []leaf{{path: joinSegs(segs), segs: segs, s: s, required: required}}
}

func joinSegs(segs []string) string {
	var b strings.Builder
	for i, s := range segs {
		if s != "[]" && i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// schemaPaths lists every path of s (objects, lists and leaves), to check that the lists of
// exceptions name fields that exist.
func schemaPaths(segs []string, s *schema, into map[string]bool) {
	into[joinSegs(segs)] = true
	switch {
	case s.Type == "array" && s.Items != nil:
		schemaPaths(append(slices.Clone(segs), "[]"), s.Items, into)
	case s.Type == "object":
		for k, p := range s.Properties {
			schemaPaths(append(slices.Clone(segs), k), p, into)
		}
	}
}

func TestLeavesWalk(t *testing.T) {
	vmi, _ := loadSchema(t, "virtualmachineinstances")
	got := map[string]leaf{}
	for _, l := range leaves([]string{"spec"}, vmi.Properties["spec"], true) {
		got[l.path] = l
	}
	for path, required := range map[string]bool{
		"spec.volumes[].name":                           true,
		"spec.domain.devices.interfaces[].bridge":       false,
		"spec.dnsConfig.nameservers[]":                  false,
		"spec.domain.resources.requests":                false,
		"spec.domain.devices.interfaces[].ports[].port": true,
	} {
		if l, ok := got[path]; !ok || l.required != required {
			t.Errorf("%s: found %v, required %v", path, ok, l.required)
		}
	}
	if _, ok := got["spec.domain.devices"]; ok {
		t.Error("an object with properties is not a leaf")
	}
}

// TestTemplateIsAVMISpec lets the VMI walk stand for the VM template: both schemas are
// generated from the same type.
func TestTemplateIsAVMISpec(t *testing.T) {
	_, vmi := loadSchema(t, "virtualmachineinstances")
	_, vm := loadSchema(t, "virtualmachines")
	at := func(m map[string]any, path ...string) any {
		var v any = m
		for _, p := range path {
			v = v.(map[string]any)["properties"].(map[string]any)[p]
		}
		return v
	}
	if !reflect.DeepEqual(at(vmi, "spec"), at(vm, "spec", "template", "spec")) {
		t.Fatal("the VM template's spec schema is not the VMI spec schema: walk it on its own")
	}
}
