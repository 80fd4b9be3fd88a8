/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// kubevirtOnlyFields are KubeVirt v1.9 API fields qvirt has no type for. A
// structural CRD prunes them before admission; a schema that preserves unknown
// fields, or a request that skipped the API server, would otherwise have them
// decoded away without a word.
var kubevirtOnlyFields = map[string]string{
	"blockSize":                 "disk block sizes",
	"chassis":                   "SMBIOS chassis settings",
	"clientPassthrough":         "USB client passthrough",
	"dhcpOptions":               "DHCP options",
	"downwardAPI":               "downwardAPI volumes",
	"downwardMetrics":           "downward metrics",
	"ephemeral":                 "ephemeral volumes",
	"filesystems":               "filesystems (virtiofs)",
	"gpus":                      "GPUs",
	"hostDevices":               "host devices",
	"ioThreads":                 "I/O thread settings",
	"ioThreadsPolicy":           "I/O thread policies",
	"launchSecurity":            "launch security (SEV)",
	"macvtap":                   "the macvtap interface binding",
	"memoryDump":                "memory dump volumes",
	"numa":                      "NUMA topology",
	"panicDevices":              "panic devices",
	"passt":                     "the passt interface binding",
	"realtime":                  "realtime vCPUs",
	"resourceClaims":            "dynamic resource claims",
	"slirp":                     "the slirp interface binding",
	"sound":                     "sound devices",
	"sysprep":                   "sysprep volumes",
	"topologySpreadConstraints": "topology spread constraints",
	"video":                     "video device settings",
}

// skippedFields are not compared: metadata has its own schema in the API server,
// status is not written by users, and dataVolumeTemplates are refused whole.
var skippedFields = map[string]bool{"metadata": true, "status": true, "dataVolumeTemplates": true}

// unknownFields refuses every field of raw that decoding into typed dropped.
// typed must be what raw decoded into.
func unknownFields(raw []byte, typed any) field.ErrorList {
	var r any
	if err := decodeJSON(raw, &r); err != nil {
		return nil // the caller has already decoded raw into typed
	}
	b, err := json.Marshal(typed)
	if err != nil {
		return nil
	}
	var t any
	if err := decodeJSON(b, &t); err != nil {
		return nil
	}
	return compareFields(nil, r, t)
}

func compareFields(p *field.Path, raw, typed any) field.ErrorList {
	var errs field.ErrorList
	switch r := raw.(type) {
	case map[string]any:
		t, _ := typed.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(r)) {
			kp := childPath(p, k)
			if skippedFields[k] {
				continue
			}
			tv, known := t[k]
			switch {
			case known:
				errs = append(errs, compareFields(kp, r[k], tv)...)
			case kubevirtOnlyFields[k] != "" && !isEmptyList(r[k]):
				// Presence alone means something here: slirp: {} is a binding.
				errs = append(errs, unsupported(kp, kubevirtOnlyFields[k]))
			case isEmptyJSON(r[k]):
				// an empty value that omitempty dropped
			default:
				errs = append(errs, notSupported(kp, nil, "unknown field %q", kp.String()))
			}
		}
	case []any:
		t, _ := typed.([]any)
		if len(t) == len(r) {
			for i := range r {
				errs = append(errs, compareFields(p.Index(i), r[i], t[i])...)
			}
		}
	}
	return errs
}

func childPath(p *field.Path, k string) *field.Path {
	if p == nil {
		return field.NewPath(k)
	}
	return p.Child(k)
}

func isEmptyList(v any) bool {
	l, ok := v.([]any)
	return v == nil || (ok && len(l) == 0)
}

func isEmptyJSON(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case json.Number:
		return x == "0"
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// decodeJSON keeps numbers as written, so that a patch never rounds them.
func decodeJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}
