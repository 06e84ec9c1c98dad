package admission

import (
	"net/http"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SelfSubjectAccessReview and SelfSubjectRulesReview (authorization.k8s.io/v1) ask the authorizer
// about the requester: what kubectl auth can-i sends. They are answered, never stored.

var (
	selfSubjectAccessReviewKind = &kind{
		group: authorizationv1.GroupName, version: "v1", kind: "SelfSubjectAccessReview",
		resource: "selfsubjectaccessreviews", singular: "selfsubjectaccessreview", verbs: []string{"create"},
		newObject: func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
	}
	selfSubjectRulesReviewKind = &kind{
		group: authorizationv1.GroupName, version: "v1", kind: "SelfSubjectRulesReview",
		resource: "selfsubjectrulesreviews", singular: "selfsubjectrulesreview", verbs: []string{"create"},
		newObject: func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} },
	}
)

// reviewRequest decodes a review: POST to the collection only.
func (s *Service) reviewRequest(w http.ResponseWriter, r *http.Request, req request) runtime.Object {
	if r.Method != http.MethodPost || req.name != "" || req.watch {
		writeStatus(w, methodNotAllowed(req.kind.gr(), r.Method))
		return nil
	}
	obj, warnings, err := s.decodeBody(w, r, req.kind)
	if err != nil {
		writeStatus(w, err)
		return nil
	}
	addWarnings(w, warnings)
	req.kind.stamp(obj, 0)
	return obj
}

// serveSelfSubjectAccessReview answers whether the requester may do what the review describes.
func (s *Service) serveSelfSubjectAccessReview(w http.ResponseWriter, r *http.Request, req request) {
	obj := s.reviewRequest(w, r, req)
	if obj == nil {
		return
	}
	rev := obj.(*authorizationv1.SelfSubjectAccessReview)
	ra, nra := rev.Spec.ResourceAttributes, rev.Spec.NonResourceAttributes
	if (ra == nil) == (nra == nil) {
		writeStatus(w, apierrors.NewInvalid(req.kind.gk(), "", field.ErrorList{
			field.Invalid(field.NewPath("spec"), rev.Spec, "exactly one of nonResourceAttributes or resourceAttributes must be specified"),
		}))
		return
	}
	a := attributes{user: req.user}
	if ra != nil {
		a.resourceRequest = true
		a.verb, a.group, a.version = ra.Verb, ra.Group, ra.Version
		a.resource, a.sub, a.ns, a.name = ra.Resource, ra.Subresource, ra.Namespace, ra.Name
	} else {
		a.verb, a.path = nra.Verb, nra.Path
	}
	ok, reason, err := s.authz.allowed(r.Context(), a)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	rev.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: ok, Reason: reason}
	writeJSON(w, http.StatusCreated, rev)
}

// serveSelfSubjectRulesReview lists the rules that apply to the requester in a namespace.
func (s *Service) serveSelfSubjectRulesReview(w http.ResponseWriter, r *http.Request, req request) {
	obj := s.reviewRequest(w, r, req)
	if obj == nil {
		return
	}
	rev := obj.(*authorizationv1.SelfSubjectRulesReview)
	if rev.Spec.Namespace == "" {
		writeStatus(w, apierrors.NewBadRequest("no namespace on request"))
		return
	}
	p, err := s.authz.policy(r.Context())
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	res, nonRes, errs := p.rulesFor(req.user, rev.Spec.Namespace)
	st := authorizationv1.SubjectRulesReviewStatus{
		ResourceRules:    []authorizationv1.ResourceRule{},
		NonResourceRules: []authorizationv1.NonResourceRule{},
		Incomplete:       len(errs) > 0,
	}
	for _, r := range res {
		st.ResourceRules = append(st.ResourceRules, authorizationv1.ResourceRule{
			Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames,
		})
	}
	for _, r := range nonRes {
		st.NonResourceRules = append(st.NonResourceRules, authorizationv1.NonResourceRule{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		st.EvaluationError = strings.Join(msgs, ", ")
	}
	rev.Status = st
	writeJSON(w, http.StatusCreated, rev)
}
