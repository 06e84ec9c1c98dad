package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

var (
	grPods       = schema.GroupResource{Resource: "pods"}
	grEvents     = schema.GroupResource{Resource: "events"}
	grNamespaces = schema.GroupResource{Resource: "namespaces"}
	gkPod        = schema.GroupKind{Kind: "Pod"}
)

// writeJSON answers obj with code.
func writeJSON(w http.ResponseWriter, code int, obj any) {
	writeJSONType(w, code, "application/json", obj)
}

// writeJSONType answers obj with code and a content type.
func writeJSONType(w http.ResponseWriter, code int, contentType string, obj any) {
	data, err := json.Marshal(obj)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("encode response: %w", err)))
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(code)
	_, _ = w.Write(append(data, '\n'))
}

// statusOf turns any error into a Kubernetes Status: StatusErrors as they are, a request NATS gave no
// answer to as 504 (as kube-apiserver answers an etcd request that timed out: a write may still be
// carried out), others as 500.
func statusOf(err error) metav1.Status {
	var se apierrors.APIStatus
	switch {
	case errors.As(err, &se):
	case bus.JetStreamOff(err):
		// An operator's to mend, not a request's to wait out.
		se = apierrors.NewServiceUnavailable(fmt.Sprintf("the store is unavailable: %v", err))
	case bus.Unanswered(err):
		se = apierrors.NewTimeoutError(fmt.Sprintf("request did not complete within requested timeout - %v; "+
			"a change it makes may still be carried out", err), 0)
	default:
		se = apierrors.NewInternalError(err)
	}
	st := se.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	return st
}

// writeStatus answers err as a Kubernetes Status object.
func writeStatus(w http.ResponseWriter, err error) {
	st := statusOf(err)
	code := int(st.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, st)
}

// resultError turns a failed CommandResult of the store into a StatusError.
func resultError(res *pb.CommandResult, name string) error {
	code := int(res.GetCode())
	reason := metav1.StatusReason(res.GetReason())
	if reason == "" {
		reason = metav1.StatusReasonUnknown
		if code >= 500 {
			reason = metav1.StatusReasonInternalError
		}
	}
	msg := res.GetMessage()
	if msg == "" {
		msg = fmt.Sprintf("pods %q: %s", name, reason)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    int32(code),
		Reason:  reason,
		Message: msg,
		Details: &metav1.StatusDetails{Name: name, Kind: "pods"},
	}}
}

// badRequest is a 400 BadRequest Status.
func badRequest(format string, args ...any) error {
	return apierrors.NewBadRequest(fmt.Sprintf(format, args...))
}

// methodNotAllowed is a 405 Status.
func methodNotAllowed(gr schema.GroupResource, verb string) error {
	return apierrors.NewMethodNotSupported(gr, verb)
}

// notFoundPath is the 404 for a URL no resource serves.
func notFoundPath(path string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "404 page not found: " + path}}},
	}}
}
