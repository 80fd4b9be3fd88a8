/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

func TestOversizedReviewsAre413(t *testing.T) {
	srv := testServer(t, StaticConfig{}, Options{MaxReviewBytes: 4096})
	big := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","object":{"pad":"` + strings.Repeat("x", 8192) + `"}}}`)
	code, resp := postRaw(t, srv, VMIValidatePath, big)
	if code != http.StatusRequestEntityTooLarge || resp.Allowed || resp.Result.Code != 413 {
		t.Errorf("announced: %d %+v", code, resp.Result)
	}
	// Without a Content-Length the cap is found while reading.
	res, err := http.Post(srv.URL+VMIValidatePath, "application/json", io.MultiReader(bytes.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusRequestEntityTooLarge || out.Response == nil || out.Response.Allowed {
		t.Errorf("chunked: %d %+v %v", res.StatusCode, out.Response, err)
	}
	if code, _ := postRaw(t, srv, VMIValidatePath, []byte("{")); code != http.StatusBadRequest {
		t.Errorf("a small malformed review: %d", code)
	}
}
