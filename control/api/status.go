package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qvirt/qvirt/node/nodeapi"
)

// statusError is an answer in Kubernetes' Status form, which kubectl and virtctl print.
type statusError struct {
	code    int
	reason  metav1.StatusReason
	message string
}

func (e *statusError) Error() string { return e.message }

func conflict(format string, a ...any) error {
	return &statusError{http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf(format, a...)}
}

func badRequest(format string, a ...any) error {
	return &statusError{http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf(format, a...)}
}

func forbidden(format string, a ...any) error {
	return &statusError{http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(format, a...)}
}

func unauthorized(format string, a ...any) error {
	return &statusError{http.StatusUnauthorized, metav1.StatusReasonUnauthorized, fmt.Sprintf(format, a...)}
}

func tooLarge(limit int64) error {
	return &statusError{http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
		fmt.Sprintf("the request body is larger than %d bytes", limit)}
}

func notFound(format string, a ...any) error {
	return &statusError{http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf(format, a...)}
}

// toStatus classifies any error into a Status: API server errors keep theirs, node agent
// errors map onto the matching HTTP code, anything else is an internal error.
func toStatus(err error) *metav1.Status {
	st := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Message: err.Error()}
	var se *statusError
	var ae apierrors.APIStatus
	switch {
	case errors.As(err, &se):
		st.Code, st.Reason = int32(se.code), se.reason
	case errors.As(err, &ae):
		s := ae.Status()
		st.Code, st.Reason, st.Details = s.Code, s.Reason, s.Details
	case errors.Is(err, nodeapi.ErrNotFound):
		st.Code, st.Reason = http.StatusNotFound, metav1.StatusReasonNotFound
	case errors.Is(err, nodeapi.ErrConflict):
		st.Code, st.Reason = http.StatusConflict, metav1.StatusReasonConflict
	case errors.Is(err, nodeapi.ErrSessionBusy), errors.Is(err, nodeapi.ErrUnavailable):
		st.Code, st.Reason = http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable
	case errors.Is(err, nodeapi.ErrBadRequest):
		st.Code, st.Reason = http.StatusBadRequest, metav1.StatusReasonBadRequest
	case errors.Is(err, nodeapi.ErrTooManyRequests):
		st.Code, st.Reason = http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	default:
		st.Code, st.Reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
	}
	return st
}

func writeStatus(w http.ResponseWriter, st *metav1.Status) {
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

func writeError(w http.ResponseWriter, err error) { writeStatus(w, toStatus(err)) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
