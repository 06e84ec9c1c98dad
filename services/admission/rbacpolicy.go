package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
)

// The default policy, as kube-apiserver's bootstrap policy, for the resources podbus serves. kube builds
// admin, edit and view by aggregation; podbus does not evaluate aggregationRule, so they carry the
// aggregated rules themselves. A new kind adds its resources here (view: read; edit: write; admin: the
// RBAC kinds).

// groupUnauthenticated is the group of anonymous requests, as Kubernetes' user package names it
// (groupMasters and groupAuthenticated are authentication's).
const groupUnauthenticated = "system:unauthenticated"

var (
	verbsRead      = []string{"get", "list", "watch"}
	verbsWrite     = []string{"create", "update", "patch", "delete", "deletecollection"}
	verbsReadWrite = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
)

func rule(verbs []string, group string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{group}, Resources: resources}
}

func urlRule(verbs []string, urls ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: urls}
}

// viewRules read what a namespace holds, secrets aside (kube's view).
func viewRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		rule(verbsRead, "", "pods", "configmaps"),
		rule(verbsRead, "", "pods/status", "namespaces/status", "pods/log"),
		rule(verbsRead, "", "namespaces"),
		rule(verbsRead, "", "events"),
		// The web view (internal/webview): effective through a ClusterRoleBinding, as every non-resource URL.
		urlRule([]string{"get"}, "/ui", "/ui/*"),
		rule(verbsRead, "apps", "daemonsets", "daemonsets/status"),
		rule(verbsRead, "policy", "poddisruptionbudgets", "poddisruptionbudgets/status"),
		rule(verbsRead, "metrics.k8s.io", "pods", "nodes"),
		rule(verbsRead, "apps", "deployments", "replicasets", "deployments/scale", "replicasets/scale", "deployments/status", "replicasets/status"),
	}
}

// editRules change what a namespace holds (kube's edit): view plus writes, not status nor RBAC.
func editRules() []rbacv1.PolicyRule {
	return append(viewRules(),
		rule(verbsWrite, "", "pods"),
		rule([]string{"create"}, "", "pods/eviction"),
		rule([]string{"create", "get"}, "", "pods/exec", "pods/attach", "pods/portforward"),
		rule(verbsWrite, "", "configmaps"),
		rule(verbsReadWrite, "", "secrets"), // kube's edit reads Secrets; view does not
		rule(verbsWrite, "", "events"),
		rule(verbsWrite, "apps", "daemonsets"),
		rule(verbsWrite, "policy", "poddisruptionbudgets"),
		rule(verbsWrite, "apps", "deployments", "replicasets", "deployments/scale", "replicasets/scale", "deployments/rollback"),
	)
}

// adminRules are edit plus granting access within the namespace (kube's admin).
func adminRules() []rbacv1.PolicyRule {
	return append(editRules(), rule(verbsReadWrite, rbacv1.GroupName, "roles", "rolebindings"))
}

func defaultClusterRoles() []*rbacv1.ClusterRole {
	roles := []*rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin"}, Rules: []rbacv1.PolicyRule{
			rule([]string{"*"}, "*", "*"),
			urlRule([]string{"*"}, "*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"}, Rules: []rbacv1.PolicyRule{
			urlRule([]string{"get"}, "/livez", "/readyz", "/healthz", "/version", "/version/",
				"/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"}, Rules: []rbacv1.PolicyRule{
			rule([]string{"create"}, authorizationv1.GroupName, "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:monitoring"}, Rules: []rbacv1.PolicyRule{
			urlRule([]string{"get"}, "/metrics", "/livez", "/readyz", "/healthz", "/livez/*", "/readyz/*", "/healthz/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"}, Rules: []rbacv1.PolicyRule{
			urlRule([]string{"get"}, "/livez", "/readyz", "/healthz", "/version", "/version/"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "admin"}, Rules: adminRules()},
		{ObjectMeta: metav1.ObjectMeta{Name: "edit", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}, Rules: editRules()},
		{ObjectMeta: metav1.ObjectMeta{Name: "view", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}, Rules: viewRules()},
	}
	for _, r := range roles {
		bootstrapMeta(&r.ObjectMeta)
	}
	return roles
}

func defaultClusterRoleBindings() []*rbacv1.ClusterRoleBinding {
	bind := func(role string, groups ...string) *rbacv1.ClusterRoleBinding {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}
		for _, g := range groups {
			b.Subjects = append(b.Subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g})
		}
		bootstrapMeta(&b.ObjectMeta)
		return b
	}
	return []*rbacv1.ClusterRoleBinding{
		bind("cluster-admin", groupMasters),
		bind("system:discovery", groupAuthenticated),
		bind("system:basic-user", groupAuthenticated),
		bind("system:public-info-viewer", groupAuthenticated, groupUnauthenticated),
		bind("system:monitoring", "system:monitoring"),
	}
}

// bootstrapMeta marks a default object as kube does: reconciled at start while autoupdate is "true".
func bootstrapMeta(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels["kubernetes.io/bootstrapping"] = "rbac-defaults"
	m.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
}

// bootstrapPolicy creates the default cluster roles and bindings, as kube-apiserver does at start: a
// missing one is created; one that exists gets back the rules (or subjects) of the default it lacks,
// keeping what an administrator added, unless its autoupdate annotation is "false". Every replica does
// it at start; create-if-absent and compare-and-set on the bucket make that safe.
func (s *Service) bootstrapPolicy(ctx context.Context) error {
	for _, r := range defaultClusterRoles() {
		if err := s.reconcileDefault(ctx, clusterRoleKind, r); err != nil {
			return err
		}
	}
	for _, b := range defaultClusterRoleBindings() {
		if err := s.reconcileDefault(ctx, clusterRoleBindingKind, b); err != nil {
			return err
		}
	}
	return nil
}

// reconcileAttempts bounds the retries of a default object's reconciliation that lost a race.
const reconcileAttempts = 8

func (s *Service) reconcileDefault(ctx context.Context, k *kind, want runtime.Object) error {
	m := objectMeta(want)
	m.UID, m.CreationTimestamp = types.UID(uuid.NewString()), metav1.NewTime(metav1.Now().Rfc3339Copy().Time)
	data, err := k.storage.encode(want)
	if err != nil {
		return err
	}
	for range reconcileAttempts {
		_, err := bus.CreateEncoded(ctx, s.buckets[k.storage.spec.Name], k.key("", m.Name), data)
		if !errors.Is(err, bus.ErrExists) {
			return err
		}
		cur, rev, err := s.getEntry(ctx, k, "", m.Name)
		if apierrors.IsNotFound(err) {
			continue // deleted in between: create it again
		}
		if err != nil {
			return err
		}
		if !reconcileWith(cur, want) {
			return nil
		}
		if _, err := s.writeObject(ctx, k, cur, rev); !errors.Is(err, bus.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("reconcile %s %s: %w", k.resource, m.Name, bus.ErrConflict)
}

// reconcileWith adds to cur what it lacks of the default want: rules not covered, subjects, labels and
// annotations. It reports whether cur changed.
func reconcileWith(cur, want runtime.Object) bool {
	cm, wm := objectMeta(cur), objectMeta(want)
	if cm.Annotations[rbacv1.AutoUpdateAnnotationKey] == "false" {
		return false
	}
	changed := false
	for _, kv := range []struct{ cur, want *map[string]string }{{&cm.Labels, &wm.Labels}, {&cm.Annotations, &wm.Annotations}} {
		for key, v := range *kv.want {
			if _, ok := (*kv.cur)[key]; !ok {
				if *kv.cur == nil {
					*kv.cur = map[string]string{}
				}
				(*kv.cur)[key], changed = v, true
			}
		}
	}
	switch c := cur.(type) {
	case *rbacv1.ClusterRole:
		for _, r := range want.(*rbacv1.ClusterRole).Rules {
			if !rulesCover(c.Rules, r) {
				c.Rules, changed = append(c.Rules, r), true
			}
		}
	case *rbacv1.ClusterRoleBinding:
		for _, sub := range want.(*rbacv1.ClusterRoleBinding).Subjects {
			if !slices.Contains(c.Subjects, sub) {
				c.Subjects, changed = append(c.Subjects, sub), true
			}
		}
	}
	return changed
}

// rulesCover is whether rules grant everything r does.
func rulesCover(rules []rbacv1.PolicyRule, r rbacv1.PolicyRule) bool {
	for _, simple := range breakdown(r) {
		if !slices.ContainsFunc(rules, func(o rbacv1.PolicyRule) bool { return ruleCovers(o, simple) }) {
			return false
		}
	}
	return true
}
