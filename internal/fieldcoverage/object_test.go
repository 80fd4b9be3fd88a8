/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package fieldcoverage

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// builder places one leaf in a copy of the base object. Every object on the way that the base
// lacks is created with its required fields, and every list gets one new element: so the leaf's
// surroundings exist whether the leaf is set or not.
type builder struct {
	samples func(path string, s *schema) []any
	// set says whether the leaf gets value or stays absent.
	set   bool
	value any
	// created lists the concrete paths (spec.volumes[0].hostDisk) of the objects and list
	// elements the builder made.
	created []string
}

func (b *builder) build(base map[string]any, root *schema, l leaf) map[string]any {
	obj := deepCopy(base).(map[string]any)
	out, _ := b.put(obj, root, l.segs, "").(map[string]any)
	return out
}

// put returns node with the rest of the path placed in it; nil means "absent".
func (b *builder) put(node any, s *schema, segs []string, p string) any {
	if len(segs) == 0 {
		if !b.set {
			return node // absent, or what the base has
		}
		// A map gets the sample's keys next to the base's (resources keep their memory).
		if have, ok := node.(map[string]any); ok && s.mapValues() != nil {
			merged := deepCopy(have).(map[string]any)
			for k, v := range b.value.(map[string]any) {
				merged[k] = deepCopy(v)
			}
			return merged
		}
		return deepCopy(b.value)
	}
	if segs[0] == "[]" {
		list, _ := node.([]any)
		if list == nil {
			b.created = append(b.created, p)
		}
		cp := fmt.Sprintf("%s[%d]", p, len(list))
		var elem any
		if len(segs) > 1 {
			elem = b.newObject(s.Items, cp, segs[1])
		}
		child := b.put(elem, s.Items, segs[1:], cp)
		if child == nil {
			return node
		}
		return append(list, child)
	}
	m, _ := node.(map[string]any)
	if m == nil {
		m = b.newObject(s, p, segs[0])
	}
	cp := segs[0]
	if p != "" {
		cp = p + "." + segs[0]
	}
	if child := b.put(m[segs[0]], s.Properties[segs[0]], segs[1:], cp); child != nil {
		m[segs[0]] = child
	} else {
		delete(m, segs[0])
	}
	return m
}

// newObject makes an object of schema s at p with its required fields but except, which the
// caller sets.
func (b *builder) newObject(s *schema, p, except string) map[string]any {
	b.created = append(b.created, p)
	m := map[string]any{}
	for _, r := range s.Required {
		if r == except {
			continue
		}
		rs, rp := s.Properties[r], p+"."+r
		if rs.Type == "object" && len(rs.Properties) > 0 {
			m[r] = b.newObject(rs, rp, "")
			continue
		}
		m[r] = b.samples(pattern(rp), rs)[0]
	}
	return m
}

var indexRE = regexp.MustCompile(`\[\d+\]`)

// pattern turns a concrete path (spec.volumes[0].name) into a schema path (spec.volumes[].name).
func pattern(p string) string { return indexRE.ReplaceAllString(p, "[]") }

// within reports whether field is p or below it.
func within(field, p string) bool {
	return field == p || strings.HasPrefix(field, p+".") || strings.HasPrefix(field, p+"[")
}

func deepCopy(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// Helpers for the contexts, on decoded JSON.

func obj(m map[string]any, path ...string) map[string]any {
	for _, k := range path {
		next, _ := m[k].(map[string]any)
		if next == nil {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m
}

// list returns the list at path, nil when any step is missing; it creates nothing.
func list(m map[string]any, path ...string) []any {
	var v any = m
	for _, k := range path {
		next, _ := v.(map[string]any)
		v = next[k]
	}
	l, _ := v.([]any)
	return l
}

func appendTo(m map[string]any, v any, path ...string) {
	parent := obj(m, path[:len(path)-1]...)
	k := path[len(path)-1]
	l, _ := parent[k].([]any)
	parent[k] = append(l, v)
}

func names(l []any) map[string]bool {
	out := map[string]bool{}
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			if n, ok := m["name"].(string); ok {
				out[n] = true
			}
		}
	}
	return out
}

func hasAny(m map[string]any, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}
