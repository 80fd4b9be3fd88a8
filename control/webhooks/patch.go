/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// jsonPatch turns what a mutation changed into add and replace operations under
// the given paths. It compares the request's own JSON with the mutated object,
// never removes anything (so fields the types do not know reach the validator
// intact) and replaces lists whole.
func jsonPatch(raw []byte, mutated any, paths ...[]string) ([]byte, error) {
	var before, after map[string]any
	if err := decodeJSON(raw, &before); err != nil {
		return nil, err
	}
	b, err := json.Marshal(mutated)
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(b, &after); err != nil {
		return nil, err
	}
	ops := []patchOp{}
	for _, p := range paths {
		ops = append(ops, diffAt(before, after, p)...)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// diffAt walks keys down both objects. Where the request lacks a level, one add
// creates it holding only the mutated value at the end of keys.
func diffAt(before, after map[string]any, keys []string) []patchOp {
	for i, k := range keys {
		av, ok := after[k]
		if !ok {
			return nil
		}
		bv, exists := before[k]
		ptr := pointer(keys[:i+1])
		if !exists || bv == nil {
			if leaf(av, keys[i+1:]) == nil {
				return nil
			}
			return []patchOp{{Op: "add", Path: ptr, Value: nest(keys[i+1:], leaf(av, keys[i+1:]))}}
		}
		if i == len(keys)-1 {
			return diff(ptr, bv, av)
		}
		bm, bok := bv.(map[string]any)
		am, aok := av.(map[string]any)
		if !bok || !aok {
			return diff(ptr, bv, av)
		}
		before, after = bm, am
	}
	return nil
}

func leaf(v any, keys []string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func nest(keys []string, v any) any {
	for i := len(keys) - 1; i >= 0; i-- {
		v = map[string]any{keys[i]: v}
	}
	return v
}

func diff(ptr string, before, after any) []patchOp {
	bm, bok := before.(map[string]any)
	am, aok := after.(map[string]any)
	if !bok || !aok {
		if reflect.DeepEqual(before, after) {
			return nil
		}
		return []patchOp{{Op: "replace", Path: ptr, Value: after}}
	}
	var ops []patchOp
	for _, k := range slices.Sorted(maps.Keys(am)) {
		kp := ptr + "/" + escapePointer(k)
		if bv, ok := bm[k]; ok {
			ops = append(ops, diff(kp, bv, am[k])...)
		} else if am[k] != nil {
			ops = append(ops, patchOp{Op: "add", Path: kp, Value: am[k]})
		}
	}
	return ops
}

func pointer(keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("/")
		b.WriteString(escapePointer(k))
	}
	return b.String()
}

// escapePointer escapes a JSON pointer token (RFC 6901); label keys hold '/'.
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
