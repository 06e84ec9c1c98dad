package admission

import (
	"bytes"
	"errors"
	"net/http"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// evictPod serves POST pods/<name>/eviction (policy/v1 Eviction, what kubectl drain sends): a graceful
// delete with the eviction's DeleteOptions, once the pod's PodDisruptionBudget allows it (disruption.go:
// 429 when it does not); the answer is kube-apiserver's 201 Success Status.
func (s *Service) evictPod(w http.ResponseWriter, r *http.Request, req request) {
	mode, err := fieldValidation(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	var ev policyv1.Eviction
	if len(bytes.TrimSpace(body)) > 0 {
		js, err := toJSON(body, r.Header.Get("Content-Type"), mode == validationStrict, evictionKind)
		if err != nil {
			writeStatus(w, err)
			return
		}
		if _, err := decodeStrict(js, mode, evictionKind, &ev); err != nil {
			writeStatus(w, err)
			return
		}
	}
	if ev.APIVersion != "" && ev.APIVersion != "policy/v1" && ev.APIVersion != "policy/v1beta1" {
		writeStatus(w, badRequest("the API version in the data (%s) does not match the expected API version (policy/v1)", ev.APIVersion))
		return
	}
	if ev.Name != "" && ev.Name != req.name {
		writeStatus(w, badRequest("name in URL does not match name in Eviction object"))
		return
	}
	var opts metav1.DeleteOptions
	if ev.DeleteOptions != nil {
		opts = *ev.DeleteOptions
	}
	stored := &pb.Pod{}
	if _, err := bus.Get(r.Context(), s.pods, bus.PodKey(req.ns, req.name), stored); errors.Is(err, bus.ErrNotFound) {
		writeStatus(w, apierrors.NewNotFound(grPods, req.name))
		return
	} else if err != nil {
		writeStatus(w, err)
		return
	}
	if err := s.checkDisruption(r.Context(), req, stored); err != nil {
		writeStatus(w, err)
		return
	}
	if _, err := s.deletePodWith(r.Context(), req, opts, podutil.ReasonEviction); err != nil {
		writeStatus(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Code:     http.StatusCreated,
	})
}

var evictionKind = &kind{group: "policy", version: "v1", kind: "Eviction", newObject: func() runtime.Object { return &policyv1.Eviction{} }}
