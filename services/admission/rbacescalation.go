package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
)

// Privilege escalation prevention, as kube-apiserver's RBAC storage: a user may write a role only with
// rules it holds itself (or the escalate verb on the role), and bind a role only if it holds the role's
// rules (or the bind verb on the role). system:masters may do both.

// admitRBAC checks a validated create (old nil) or update of an RBAC object by req's user.
func (s *Service) admitRBAC(ctx context.Context, req request, obj, old runtime.Object) error {
	u := req.user
	if u == nil || slices.Contains(u.Groups, groupMasters) {
		return nil
	}
	p, err := s.authz.policy(ctx)
	if err != nil {
		return err
	}
	k := req.kind
	m := objectMeta(obj)
	switch o := obj.(type) {
	case *rbacv1.Role, *rbacv1.ClusterRole:
		rules := rolePolicyRules(o)
		if old != nil && equality.Semantic.DeepEqual(rules, rolePolicyRules(old)) {
			return nil
		}
		if ok, _ := p.allows(attributes{user: u, resourceRequest: true, verb: "escalate", group: k.group, resource: k.resource, ns: m.Namespace, name: m.Name}); ok {
			return nil
		}
		return confirmNoEscalation(p, u, m.Namespace, rules, k, m.Name)
	case *rbacv1.RoleBinding:
		return s.admitBinding(p, u, o.RoleRef, o.Namespace, k, o.Name)
	case *rbacv1.ClusterRoleBinding:
		return s.admitBinding(p, u, o.RoleRef, "", k, o.Name)
	}
	return nil
}

func rolePolicyRules(o runtime.Object) []rbacv1.PolicyRule {
	switch o := o.(type) {
	case *rbacv1.Role:
		return o.Rules
	case *rbacv1.ClusterRole:
		return o.Rules
	}
	return nil
}

// admitBinding allows binding ref in ns ("" cluster-wide) to a user who may bind it or holds its rules.
func (s *Service) admitBinding(p *policy, u *userInfo, ref rbacv1.RoleRef, ns string, k *kind, name string) error {
	resource := "roles"
	if ref.Kind == "ClusterRole" {
		resource = "clusterroles"
	}
	if ok, _ := p.allows(attributes{user: u, resourceRequest: true, verb: "bind", group: rbacv1.GroupName, resource: resource, ns: ns, name: ref.Name}); ok {
		return nil
	}
	var rules []rbacv1.PolicyRule
	switch ref.Kind {
	case "ClusterRole":
		cr := p.clusterRoles[ref.Name]
		if cr == nil {
			return apierrors.NewNotFound(rbacv1.Resource("clusterroles"), ref.Name)
		}
		rules = cr.Rules
	default:
		r := p.roles[ns+"/"+ref.Name]
		if r == nil {
			return apierrors.NewNotFound(rbacv1.Resource("roles"), ref.Name)
		}
		rules = r.Rules
	}
	return confirmNoEscalation(p, u, ns, rules, k, name)
}

// confirmNoEscalation refuses rules that u does not hold in ns, with kube's message.
func confirmNoEscalation(p *policy, u *userInfo, ns string, rules []rbacv1.PolicyRule, k *kind, name string) error {
	res, nonRes, errs := p.rulesFor(u, ns)
	owner := append(res, nonRes...)
	var missing []rbacv1.PolicyRule
	for _, r := range rules {
		for _, simple := range breakdown(r) {
			if !rulesCover(owner, simple) {
				missing = append(missing, simple)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var lines []string
	for _, r := range compactRules(missing) {
		lines = append(lines, compactString(r))
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", u.Name, u.Groups, strings.Join(lines, "\n"))
	if len(errs) > 0 {
		msg += fmt.Sprintf("; resolution errors: %v", errs)
	}
	return apierrors.NewForbidden(k.gr(), name, errors.New(msg))
}

// breakdown splits a rule into rules of one verb and one group, resource and name (or one URL).
func breakdown(r rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, verb := range r.Verbs {
		for _, url := range r.NonResourceURLs {
			out = append(out, rbacv1.PolicyRule{Verbs: []string{verb}, NonResourceURLs: []string{url}})
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if len(r.ResourceNames) == 0 {
					out = append(out, rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{g}, Resources: []string{res}})
				}
				for _, n := range r.ResourceNames {
					out = append(out, rbacv1.PolicyRule{Verbs: []string{verb}, APIGroups: []string{g}, Resources: []string{res}, ResourceNames: []string{n}})
				}
			}
		}
	}
	return out
}

// ruleCovers is whether owner grants everything sub does, as kube's ruleCovers.
func ruleCovers(owner, sub rbacv1.PolicyRule) bool {
	hasAll := func(set, want []string) bool {
		return !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(set, w) })
	}
	verbs := slices.Contains(owner.Verbs, rbacv1.VerbAll) || hasAll(owner.Verbs, sub.Verbs)
	groups := slices.Contains(owner.APIGroups, rbacv1.APIGroupAll) || hasAll(owner.APIGroups, sub.APIGroups)
	resources := slices.Contains(owner.Resources, rbacv1.ResourceAll) || !slices.ContainsFunc(sub.Resources, func(res string) bool {
		if slices.Contains(owner.Resources, res) {
			return false
		}
		_, subres, ok := strings.Cut(res, "/")
		return !ok || !slices.Contains(owner.Resources, "*/"+subres)
	})
	urls := !slices.ContainsFunc(sub.NonResourceURLs, func(p string) bool {
		return !nonResourceURLMatches(&owner, p)
	})
	names := len(owner.ResourceNames) == 0 || (len(sub.ResourceNames) > 0 && hasAll(owner.ResourceNames, sub.ResourceNames))
	return verbs && groups && resources && urls && names
}

// compactRules merges simple rules that differ only in their verb.
func compactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	idx := map[string]int{}
	for _, r := range rules {
		key := fmt.Sprint(r.APIGroups, r.Resources, r.ResourceNames, r.NonResourceURLs)
		if i, ok := idx[key]; ok {
			out[i].Verbs = append(out[i].Verbs, r.Verbs...)
			continue
		}
		idx[key] = len(out)
		out = append(out, *r.DeepCopy())
	}
	return out
}

// compactString prints a rule as kube's escalation message does.
func compactString(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, v))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}
