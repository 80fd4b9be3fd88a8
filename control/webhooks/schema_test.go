/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// crdSchema is the part of a structural OpenAPI schema the fixtures are checked
// against, so that each one reaches the webhooks through a real API server
// instead of failing its schema validation first.
type crdSchema struct {
	Type                 string                `json:"type"`
	Properties           map[string]*crdSchema `json:"properties"`
	AdditionalProperties json.RawMessage       `json:"additionalProperties"`
	Items                *crdSchema            `json:"items"`
	Required             []string              `json:"required"`
	MaxItems             *int                  `json:"maxItems"`
	PreserveUnknown      bool                  `json:"x-kubernetes-preserve-unknown-fields"`
	IntOrString          bool                  `json:"x-kubernetes-int-or-string"`
}

// loadCRDSchema reads the v1 schema of deploy/crds/kubevirt.io_<plural>.yaml.
func loadCRDSchema(t *testing.T, plural string) *crdSchema {
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
					OpenAPIV3Schema *crdSchema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1" {
			return v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatalf("%s: no v1 schema", plural)
	return nil
}

// check returns schema violations: wrong types, missing required fields, fields
// the schema does not know (a real API server prunes or refuses them) and lists
// over maxItems. Nulls are skipped, as the API server drops them; the root
// metadata is left to the API server's own ObjectMeta validation.
func (s *crdSchema) check(path string, v any) []string {
	if v == nil || s == nil {
		return nil
	}
	if s.IntOrString {
		switch v.(type) {
		case string, json.Number:
			return nil
		}
		return []string{fmt.Sprintf("%s: want int or string, got %T", path, v)}
	}
	var errs []string
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want object, got %T", path, v)}
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: required", path, r))
			}
		}
		var additional *crdSchema
		if len(s.AdditionalProperties) > 0 && s.AdditionalProperties[0] == '{' {
			additional = &crdSchema{}
			if err := json.Unmarshal(s.AdditionalProperties, additional); err != nil {
				return []string{fmt.Sprintf("%s: schema: %v", path, err)}
			}
		}
		for k, fv := range m {
			switch prop, known := s.Properties[k]; {
			case path == "" && k == "metadata":
				// ObjectMeta is validated by the API server itself.
			case known:
				errs = append(errs, prop.check(path+"."+k, fv)...)
			case additional != nil:
				errs = append(errs, additional.check(path+"."+k, fv)...)
			case !s.PreserveUnknown && len(s.AdditionalProperties) == 0:
				errs = append(errs, fmt.Sprintf("%s.%s: unknown field", path, k))
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want array, got %T", path, v)}
		}
		if s.MaxItems != nil && len(l) > *s.MaxItems {
			errs = append(errs, fmt.Sprintf("%s: more than %d items", path, *s.MaxItems))
		}
		for i, item := range l {
			errs = append(errs, s.Items.check(fmt.Sprintf("%s[%d]", path, i), item)...)
		}
	case "string":
		if _, ok := v.(string); !ok {
			errs = append(errs, fmt.Sprintf("%s: want string, got %T", path, v))
		}
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok || (s.Type == "integer" && strings.ContainsAny(n.String(), ".eE")) {
			errs = append(errs, fmt.Sprintf("%s: want %s, got %v", path, s.Type, v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			errs = append(errs, fmt.Sprintf("%s: want boolean, got %T", path, v))
		}
	}
	slices.Sort(errs)
	return errs
}

func TestCRDSchemaCheck(t *testing.T) {
	s := loadCRDSchema(t, "virtualmachineinstances")
	var obj any
	if err := decodeJSON([]byte(`{"spec":{"domain":{"cpu":{"cores":"2"},"devices":{"disks":[{"bus":"virtio"}]},"nope":1}}}`), &obj); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(s.check("", obj), "\n")
	for _, want := range []string{".spec.domain.cpu.cores: want integer", ".spec.domain.devices.disks[0].name: required", ".spec.domain.nope: unknown field"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}
