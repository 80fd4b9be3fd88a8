/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package webhooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The webhook paths are KubeVirt's, so that its webhook configurations work
// against virt-api unchanged. The VMI validator also answers on one path for both
// operations.
const (
	VMIMutatePath               = "/virtualmachineinstances-mutate"
	VMIValidatePath             = "/virtualmachineinstances-validate"
	VMICreateValidatePath       = "/virtualmachineinstances-validate-create"
	VMIUpdateValidatePath       = "/virtualmachineinstances-validate-update"
	VMMutatePath                = "/virtualmachines-mutate"
	VMValidatePath              = "/virtualmachines-validate"
	MigrationMutatePath         = "/migration-mutate-create"
	MigrationCreateValidatePath = "/migration-validate-create"
	MigrationUpdateValidatePath = "/migration-validate-update"
)

// DefaultMaxReviewBytes is above what the API server sends: an object within its 3 MiB request
// limit plus, for an update, the old object as stored (etcd's 1.5 MiB), in JSON.
const DefaultMaxReviewBytes = 8 << 20

type admitFunc func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

type server struct {
	cfg  Config
	opts Options
}

// Register serves the mutating and validating webhooks on mux.
func Register(mux *http.ServeMux, cfg Config, opts Options) {
	s := &server{cfg: cfg, opts: opts.withDefaults()}
	for path, admit := range map[string]admitFunc{
		VMIMutatePath:               s.mutateVMI,
		VMIValidatePath:             s.validateVMI,
		VMICreateValidatePath:       s.validateVMI,
		VMIUpdateValidatePath:       s.validateVMI,
		VMMutatePath:                s.mutateVM,
		VMValidatePath:              s.validateVM,
		MigrationMutatePath:         s.mutateMigration,
		MigrationCreateValidatePath: s.validateMigration,
		MigrationUpdateValidatePath: s.validateMigration,
		EvictionPath:                s.validateEviction,
	} {
		mux.Handle(path, s.handler(path, admit))
	}
}

func (s *server) handler(path string, admit admitFunc) http.Handler {
	log := s.opts.Logger.WithValues("webhook", path)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "admission reviews are sent with POST", http.StatusMethodNotAllowed)
			return
		}
		max := s.opts.MaxReviewBytes
		if r.ContentLength > max {
			writeReview(w, log, http.StatusRequestEntityTooLarge, tooLarge(max))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			writeReview(w, log, http.StatusRequestEntityTooLarge, tooLarge(max))
			return
		case err != nil:
			writeReview(w, log, http.StatusBadRequest, badRequest("reading the admission review: %v", err))
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil {
			writeReview(w, log, http.StatusBadRequest, badRequest("the body is not an AdmissionReview: %v", err))
			return
		}
		if gvk := review.GroupVersionKind(); gvk != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
			writeReview(w, log, http.StatusBadRequest, badRequest("expected an admission.k8s.io/v1 AdmissionReview, got apiVersion %q kind %q", review.APIVersion, review.Kind))
			return
		}
		if review.Request == nil {
			writeReview(w, log, http.StatusBadRequest, badRequest("the AdmissionReview carries no request"))
			return
		}
		resp := safeAdmit(log, admit, review.Request)
		resp.UID = review.Request.UID
		writeReview(w, log, http.StatusOK, resp)
	})
}

// safeAdmit turns a panic into a denial of this one request.
func safeAdmit(log logr.Logger, admit admitFunc, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	log = log.WithValues("uid", req.UID, "operation", req.Operation, "resource", req.Resource.Resource,
		"namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username)
	defer func() {
		if p := recover(); p != nil {
			log.Error(fmt.Errorf("panic: %v", p), "admission failed", "stack", string(debug.Stack()))
			resp = deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, "internal error in the qvirt admission webhook")
		}
	}()
	resp = admit(req)
	if !resp.Allowed {
		log.V(1).Info("denied", "message", resp.Result.Message)
	}
	return resp
}

func writeReview(w http.ResponseWriter, log logr.Logger, code int, resp *admissionv1.AdmissionResponse) {
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: resp,
	}
	b, err := json.Marshal(review)
	if err != nil {
		log.Error(err, "encoding the admission response")
		http.Error(w, "encoding the admission response failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if _, err := w.Write(b); err != nil {
		log.V(1).Info("writing the admission response", "error", err.Error())
	}
}

func tooLarge(max int64) *admissionv1.AdmissionResponse {
	return deny(http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
		"the admission review is larger than %d bytes", max)
}

func allow() *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func allowWithPatch(patch []byte) *admissionv1.AdmissionResponse {
	if len(patch) == 0 {
		return allow()
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

func deny(code int32, reason metav1.StatusReason, format string, args ...any) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: fmt.Sprintf(format, args...),
	}}
}

func badRequest(format string, args ...any) *admissionv1.AdmissionResponse {
	return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, format, args...)
}

// invalidResponse is KubeVirt's 422: one cause per error, the message their
// messages joined by ", ".
func invalidResponse(errs field.ErrorList) *admissionv1.AdmissionResponse {
	causes := make([]metav1.StatusCause, 0, len(errs))
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msg := e.Detail
		if msg == "" {
			msg = e.Error()
		}
		msgs = append(msgs, msg)
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseType(e.Type), Message: msg, Field: e.Field})
	}
	resp := deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "%s", strings.Join(msgs, ", "))
	resp.Result.Details = &metav1.StatusDetails{Causes: causes}
	return resp
}

func verdict(errs field.ErrorList) *admissionv1.AdmissionResponse {
	if len(errs) > 0 {
		return invalidResponse(errs)
	}
	return allow()
}
