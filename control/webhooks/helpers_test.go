/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// testServer serves the webhooks over HTTP the way virt-api does.
func testServer(t *testing.T, cfg Config, opts Options) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	Register(mux, cfg, opts)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// request is one admission request as the API server builds it.
type request struct {
	path        string
	op          admissionv1.Operation
	resource    string
	subResource string
	object      []byte
	oldObject   []byte
	user        authenticationv1.UserInfo
}

var alice = authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}

func post(t *testing.T, srv *httptest.Server, r request) (int, *admissionv1.AdmissionResponse) {
	t.Helper()
	if r.resource == "" {
		r.resource = resourceFor(r.path)
	}
	uid := types.UID(fmt.Sprintf("uid-%s-%s", r.op, r.path))
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:         uid,
			Resource:    metav1.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: r.resource},
			SubResource: r.subResource,
			Operation:   r.op,
			Namespace:   "default",
			UserInfo:    r.user,
			Object:      runtime.RawExtension{Raw: r.object},
			OldObject:   runtime.RawExtension{Raw: r.oldObject},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	code, resp := postRaw(t, srv, r.path, body)
	if resp != nil && resp.UID != uid {
		t.Errorf("response uid %q, want %q", resp.UID, uid)
	}
	return code, resp
}

func postRaw(t *testing.T, srv *httptest.Server, path string, body []byte) (int, *admissionv1.AdmissionResponse) {
	t.Helper()
	res, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatalf("%s answered %d with no AdmissionReview: %v", path, res.StatusCode, err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("%s answered %+v", path, out)
	}
	return res.StatusCode, out.Response
}

func resourceFor(path string) string {
	switch {
	case strings.HasPrefix(path, "/virtualmachineinstances"):
		return vmiResource
	case strings.HasPrefix(path, "/virtualmachines"):
		return vmResource
	default:
		return migrationResource
	}
}

// applyPatch applies the add and replace operations the mutators emit.
func applyPatch(t *testing.T, obj []byte, patch []byte) []byte {
	t.Helper()
	if len(patch) == 0 {
		return obj
	}
	var doc map[string]any
	if err := decodeJSON(obj, &doc); err != nil {
		t.Fatal(err)
	}
	var ops []patchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch is not JSON Patch: %v", err)
	}
	for _, op := range ops {
		if op.Op != "add" && op.Op != "replace" {
			t.Fatalf("unexpected op %q", op.Op)
		}
		tokens := strings.Split(op.Path, "/")[1:]
		cur := doc
		for i, tok := range tokens {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			if i == len(tokens)-1 {
				if _, exists := cur[tok]; op.Op == "replace" && !exists {
					t.Fatalf("replace of missing %s", op.Path)
				}
				cur[tok] = op.Value
				break
			}
			next, ok := cur[tok].(map[string]any)
			if !ok {
				t.Fatalf("patch path %s goes through a missing or non-object %q", op.Path, tok)
			}
			cur = next
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// causeAt reports whether a 422 names the field.
func causeAt(resp *admissionv1.AdmissionResponse, field string) bool {
	if resp.Result == nil || resp.Result.Details == nil {
		return false
	}
	for _, c := range resp.Result.Details.Causes {
		if c.Field == field {
			return true
		}
	}
	return false
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustURL(path string) *url.URL {
	u, err := url.Parse(path)
	if err != nil {
		panic(err)
	}
	return u
}
