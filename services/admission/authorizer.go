package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Authorization is Kubernetes RBAC, evaluated from the watch caches of the four RBAC kinds, so deciding
// costs no read of the store:
//
//	request ──attributesOf──▶ attributes (user, verb, group, resource, subresource, namespace, name, or
//	                          a non-resource path) ──▶ ClusterRoleBindings, then the RoleBindings of the
//	                          namespace, whose subjects include the user ──▶ their roles' rules ──▶ allow
//	                          at the first rule that matches, else 403 with kube's message
//
// The decoded policy is rebuilt when any of the four caches moves. A watch is authorized when it starts,
// as in kube. ClusterRole aggregationRule is not evaluated: a ClusterRole's own rules are its rules (the
// default roles are written complete).

// attributes describe a request as kube's authorizer.Attributes do.
type attributes struct {
	user                    *userInfo
	verb                    string
	resourceRequest         bool
	group, version          string
	resource, sub, ns, name string
	path                    string // non-resource requests
}

// watchRequested is whether a request's query asks for a watch; the router and the authorizer share it
// so that what is authorized is what is served.
func watchRequested(q url.Values) bool {
	v := q.Get("watch")
	return v == "true" || v == "1"
}

// attributesOf parses a request as kube's RequestInfoFactory does: /api/v1/... and /apis/<g>/<v>/...
// with something after the version are resource requests, every other path is a non-resource URL
// whose verb is the lower-cased method.
func attributesOf(r *http.Request, u *userInfo) attributes {
	p := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(p, "/")
	a := attributes{user: u, path: r.URL.Path, verb: strings.ToLower(r.Method)}
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		a.version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		a.group, a.version, parts = parts[1], parts[2], parts[3:]
	default:
		return a
	}
	a.resourceRequest = true
	switch r.Method {
	case http.MethodPost:
		a.verb = "create"
	case http.MethodGet, http.MethodHead:
		a.verb = "get"
	case http.MethodPut:
		a.verb = "update"
	case http.MethodPatch:
		a.verb = "patch"
	case http.MethodDelete:
		a.verb = "delete"
	default:
		a.verb = ""
	}
	if parts[0] == "watch" && len(parts) > 1 {
		a.verb, parts = "watch", parts[1:]
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		a.ns = parts[1]
		if len(parts) > 2 && parts[2] != "status" && parts[2] != "finalize" {
			parts = parts[2:]
		}
	}
	a.resource = parts[0]
	if len(parts) > 1 {
		a.name = parts[1]
	}
	if len(parts) > 2 {
		a.sub = parts[2]
	}
	if a.name == "" && a.verb == "get" {
		q := r.URL.Query()
		a.verb = "list"
		if watchRequested(q) {
			a.verb = "watch"
		}
		// A list of one name by field selector is about that name (a rule's resourceNames may allow it).
		if sel, err := fields.ParseSelector(q.Get("fieldSelector")); err == nil {
			if name, ok := sel.RequiresExactMatch("metadata.name"); ok && len(content.IsPathSegmentName(name)) == 0 {
				a.name = name
			}
		}
	}
	if a.name == "" && a.verb == "delete" {
		a.verb = "deletecollection"
	}
	if a.resource == "pods" && streamSubresources[a.sub] != "" && a.verb != "" {
		a.verb = "create" // a WebSocket upgrade is a GET: still create (streamSubresources)
	}
	return a
}

// authorize answers 403 and returns false unless RBAC allows the request.
func (s *Service) authorize(w http.ResponseWriter, r *http.Request, a attributes) bool {
	ok, reason, err := s.authz.allowed(r.Context(), a)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("authorize: %w", err)))
		return false
	}
	if !ok {
		writeStatus(w, forbidden(a, reason))
	}
	return ok
}

// forbidden is kube-apiserver's 403 for a request RBAC does not allow.
func forbidden(a attributes, reason string) error {
	msg := forbiddenMessage(a)
	if reason != "" {
		msg += ": " + reason
	}
	var gr schema.GroupResource
	if a.resourceRequest {
		gr = schema.GroupResource{Group: a.group, Resource: a.resource}
	}
	return apierrors.NewForbidden(gr, a.name, errors.New(msg))
}

func forbiddenMessage(a attributes) string {
	if !a.resourceRequest {
		return fmt.Sprintf("User %q cannot %s path %q", a.user.Name, a.verb, a.path)
	}
	res := a.resource
	if a.sub != "" {
		res += "/" + a.sub
	}
	if a.ns != "" {
		return fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", a.user.Name, a.verb, res, a.group, a.ns)
	}
	return fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", a.user.Name, a.verb, res, a.group)
}

// Rule matching, as kube's rbac/v1 evaluation helpers.

func verbMatches(r *rbacv1.PolicyRule, verb string) bool {
	return slices.Contains(r.Verbs, rbacv1.VerbAll) || slices.Contains(r.Verbs, verb)
}

func groupMatches(r *rbacv1.PolicyRule, group string) bool {
	return slices.Contains(r.APIGroups, rbacv1.APIGroupAll) || slices.Contains(r.APIGroups, group)
}

// resourceMatches matches "resource" or "resource/sub"; "*" matches every resource and subresource,
// "*/sub" a subresource of any resource.
func resourceMatches(r *rbacv1.PolicyRule, resource, sub string) bool {
	combined := resource
	if sub != "" {
		combined += "/" + sub
	}
	for _, rr := range r.Resources {
		switch {
		case rr == rbacv1.ResourceAll, rr == combined:
			return true
		case sub != "" && rr == "*/"+sub:
			return true
		}
	}
	return false
}

func resourceNameMatches(r *rbacv1.PolicyRule, name string) bool {
	return len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)
}

// nonResourceURLMatches matches a path exactly, or by prefix for a rule ending in "*".
func nonResourceURLMatches(r *rbacv1.PolicyRule, p string) bool {
	for _, u := range r.NonResourceURLs {
		switch {
		case u == rbacv1.NonResourceAll, u == p:
			return true
		case strings.HasSuffix(u, "*") && strings.HasPrefix(p, strings.TrimSuffix(u, "*")):
			return true
		}
	}
	return false
}

// ruleAllows is whether one rule allows the request.
func ruleAllows(a attributes, r *rbacv1.PolicyRule) bool {
	if !verbMatches(r, a.verb) {
		return false
	}
	if !a.resourceRequest {
		return nonResourceURLMatches(r, a.path)
	}
	return groupMatches(r, a.group) && resourceMatches(r, a.resource, a.sub) && resourceNameMatches(r, a.name)
}

// appliesTo is the subject of subjects that names u, if any; ServiceAccount subjects without a
// namespace are in the binding's.
func appliesTo(u *userInfo, subjects []rbacv1.Subject, bindingNS string) (*rbacv1.Subject, bool) {
	for i := range subjects {
		s := &subjects[i]
		switch s.Kind {
		case rbacv1.UserKind:
			if u.Name == s.Name {
				return s, true
			}
		case rbacv1.GroupKind:
			if slices.Contains(u.Groups, s.Name) {
				return s, true
			}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = bindingNS
			}
			if ns != "" && u.Name == "system:serviceaccount:"+ns+":"+s.Name {
				return s, true
			}
		}
	}
	return nil, false
}

// policy is the decoded RBAC state at the caches' revisions.
type policy struct {
	revs            [4]uint64
	clusterRoles    map[string]*rbacv1.ClusterRole
	roles           map[string]*rbacv1.Role // by namespace/name
	clusterBindings []*rbacv1.ClusterRoleBinding
	bindings        map[string][]*rbacv1.RoleBinding // by namespace
}

// visit calls fn with every rule that applies to u in namespace ns ("" cluster scope): those of
// ClusterRoleBindings first, then those of the namespace's RoleBindings, with a description of the
// binding that grants it. fn returns false to stop. Bindings to missing roles are returned as errors.
func (p *policy) visit(u *userInfo, ns string, fn func(source string, r *rbacv1.PolicyRule) bool) []error {
	var errs []error
	for _, b := range p.clusterBindings {
		s, ok := appliesTo(u, b.Subjects, "")
		if !ok {
			continue
		}
		cr := p.clusterRoles[b.RoleRef.Name]
		if b.RoleRef.Kind != "ClusterRole" || cr == nil {
			errs = append(errs, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), b.RoleRef.Name))
			continue
		}
		src := fmt.Sprintf("ClusterRoleBinding %q of ClusterRole %q to %s", b.Name, cr.Name, describeSubject(s, ""))
		for i := range cr.Rules {
			if !fn(src, &cr.Rules[i]) {
				return errs
			}
		}
	}
	if ns == "" {
		return errs
	}
	for _, b := range p.bindings[ns] {
		s, ok := appliesTo(u, b.Subjects, ns)
		if !ok {
			continue
		}
		var rules []rbacv1.PolicyRule
		switch b.RoleRef.Kind {
		case "ClusterRole":
			cr := p.clusterRoles[b.RoleRef.Name]
			if cr == nil {
				errs = append(errs, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), b.RoleRef.Name))
				continue
			}
			rules = cr.Rules
		case "Role":
			r := p.roles[ns+"/"+b.RoleRef.Name]
			if r == nil {
				errs = append(errs, apierrors.NewNotFound(rbacv1.Resource("role"), b.RoleRef.Name))
				continue
			}
			rules = r.Rules
		}
		src := fmt.Sprintf("RoleBinding %q of %s %q to %s", b.Name+"/"+b.Namespace, b.RoleRef.Kind, b.RoleRef.Name, describeSubject(s, ns))
		for i := range rules {
			if !fn(src, &rules[i]) {
				return errs
			}
		}
	}
	return errs
}

func describeSubject(s *rbacv1.Subject, bindingNS string) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		ns := s.Namespace
		if ns == "" {
			ns = bindingNS
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+ns)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// allows decides a request: allowed with the binding that allows it as reason, or not with the errors
// met on the way as reason.
func (p *policy) allows(a attributes) (bool, string) {
	var by string
	errs := p.visit(a.user, a.ns, func(src string, r *rbacv1.PolicyRule) bool {
		if ruleAllows(a, r) {
			by = src
			return false
		}
		return true
	})
	if by != "" {
		return true, "RBAC: allowed by " + by
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		if len(msgs) == 1 {
			return false, "RBAC: " + msgs[0]
		}
		return false, "RBAC: [" + strings.Join(msgs, ", ") + "]"
	}
	return false, ""
}

// rulesFor lists the rules that apply to u in ns, split into resource and non-resource rules, and
// whether some binding could not be resolved.
func (p *policy) rulesFor(u *userInfo, ns string) (res, nonRes []rbacv1.PolicyRule, errs []error) {
	errs = p.visit(u, ns, func(_ string, r *rbacv1.PolicyRule) bool {
		if len(r.NonResourceURLs) > 0 {
			nonRes = append(nonRes, *r)
		} else {
			res = append(res, *r)
		}
		return true
	})
	return res, nonRes, errs
}

// rbacKinds are the kinds the policy is read from, in policy.revs order.
var rbacKinds = [4]*kind{clusterRoleKind, clusterRoleBindingKind, roleKind, roleBindingKind}

// authorizer keeps the policy decoded from the RBAC kinds' watch caches.
type authorizer struct {
	caches func() [4]*watchCache
	mu     sync.Mutex
	cur    *policy
}

func (s *Service) newAuthorizer() *authorizer {
	return &authorizer{caches: sync.OnceValue(func() [4]*watchCache {
		var out [4]*watchCache
		for i, k := range rbacKinds {
			out[i] = s.cache(s.reg.lookup(k.group, k.version, k.resource))
		}
		return out
	})}
}

// allowed decides a request from the current policy; the reason says which binding allowed it or
// which bindings refer to missing roles.
func (z *authorizer) allowed(ctx context.Context, a attributes) (bool, string, error) {
	if a.user == nil {
		return false, "", nil
	}
	p, err := z.policy(ctx)
	if err != nil {
		return false, "", err
	}
	ok, reason := p.allows(a)
	return ok, reason, nil
}

// policy returns the policy as the caches hold it now, decoding it again when one of them moved.
func (z *authorizer) policy(ctx context.Context) (*policy, error) {
	caches := z.caches()
	var revs [4]uint64
	for i, c := range caches {
		if !c.isReady() {
			if err := c.waitReady(ctx); err != nil {
				return nil, err
			}
		}
		revs[i] = c.currentRV()
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cur != nil && z.cur.revs == revs {
		return z.cur, nil
	}
	p := &policy{clusterRoles: map[string]*rbacv1.ClusterRole{}, roles: map[string]*rbacv1.Role{}, bindings: map[string][]*rbacv1.RoleBinding{}}
	for i, c := range caches {
		rev, objs, err := c.snapshot()
		if err != nil {
			return nil, err
		}
		p.revs[i] = rev
		for _, o := range objs {
			switch o := o.(type) {
			case *rbacv1.ClusterRole:
				p.clusterRoles[o.Name] = o
			case *rbacv1.ClusterRoleBinding:
				p.clusterBindings = append(p.clusterBindings, o)
			case *rbacv1.Role:
				p.roles[o.Namespace+"/"+o.Name] = o
			case *rbacv1.RoleBinding:
				p.bindings[o.Namespace] = append(p.bindings[o.Namespace], o)
			}
		}
	}
	z.cur = p
	return p, nil
}

// snapshot decodes every cached object, in key order, with the resourceVersion they are at.
func (c *watchCache) snapshot() (uint64, []runtime.Object, error) {
	c.mu.Lock()
	rv := c.rv
	entries := slices.Clone(c.sortedLocked())
	c.mu.Unlock()
	out := make([]runtime.Object, 0, len(entries))
	for _, e := range entries {
		o, err := c.decode(e, e.rev)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, o)
	}
	return rv, out, nil
}

// requester is the identity authorization decides on: the test hook's when set, else the authenticated
// user.
func (s *Service) requester(r *http.Request, u *userInfo) *userInfo {
	if s.cfg.testUser != nil {
		return s.cfg.testUser(r, u)
	}
	return u
}
