package admission

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
)

// The default policy, as kube-apiserver's bootstrap policy, for the resources podbus serves. kube builds
// admin, edit and view by aggregation; podbus does not evaluate aggregationRule, so they carry the
// aggregated rules themselves. A new kind adds its resources here (view: read; edit: write; admin: the
// RBAC kinds).

// Groups and users the default bindings name, as Kubernetes' user package.
const (
	groupMasters         = "system:masters"
	groupAuthenticated   = "system:authenticated"
	groupUnauthenticated = "system:unauthenticated"
)

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
	}
}

// editRules change what a namespace holds (kube's edit): view plus writes, not status nor RBAC.
func editRules() []rbacv1.PolicyRule {
	return append(viewRules(),
		rule(verbsWrite, "", "pods"),
		rule([]string{"create"}, "", "pods/eviction"),
		rule(verbsWrite, "", "configmaps"),
		rule(verbsWrite, "", "events"),
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

// bootstrapPolicy creates the default cluster roles and bindings that do not exist. Every replica does
// it at start; create-if-absent on the bucket makes that safe. An existing object is left as it is, so
// an administrator's change to a default role stays.
func (s *Service) bootstrapPolicy(ctx context.Context) error {
	now := metav1.NewTime(metav1.Now().Rfc3339Copy().Time)
	var objs []runtime.Object
	for _, r := range defaultClusterRoles() {
		objs = append(objs, r)
	}
	for _, b := range defaultClusterRoleBindings() {
		objs = append(objs, b)
	}
	for _, o := range objs {
		k := clusterRoleKind
		if _, ok := o.(*rbacv1.ClusterRoleBinding); ok {
			k = clusterRoleBindingKind
		}
		m := objectMeta(o)
		m.UID, m.CreationTimestamp = types.UID(uuid.NewString()), now
		data, err := k.storage.encode(o)
		if err != nil {
			return err
		}
		_, err = bus.CreateEncoded(ctx, s.buckets[k.storage.spec.Name], k.key("", m.Name), data)
		if err != nil && !errors.Is(err, bus.ErrExists) {
			return fmt.Errorf("create %s %s: %w", k.resource, m.Name, err)
		}
	}
	return nil
}
