package admission

import (
	"errors"
	"net/http/httptest"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRuleAllows(t *testing.T) {
	res := func(verb, group, resource, sub, name string) attributes {
		return attributes{resourceRequest: true, verb: verb, group: group, resource: resource, sub: sub, name: name}
	}
	url := func(verb, path string) attributes { return attributes{verb: verb, path: path} }
	r := func(verbs, groups, resources, names []string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
	}
	s := func(v ...string) []string { return v }
	tests := []struct {
		name string
		rule rbacv1.PolicyRule
		a    attributes
		want bool
	}{
		{"exact", r(s("get"), s(""), s("pods"), nil), res("get", "", "pods", "", "p"), true},
		{"other verb", r(s("get"), s(""), s("pods"), nil), res("list", "", "pods", "", ""), false},
		{"other group", r(s("get"), s("apps"), s("pods"), nil), res("get", "", "pods", "", "p"), false},
		{"other resource", r(s("get"), s(""), s("pods"), nil), res("get", "", "nodes", "", "n"), false},
		{"verb wildcard", r(s("*"), s(""), s("pods"), nil), res("deletecollection", "", "pods", "", ""), true},
		{"group wildcard", r(s("get"), s("*"), s("roles"), nil), res("get", "rbac.authorization.k8s.io", "roles", "", "r"), true},
		{"resource wildcard covers subresources", r(s("create"), s(""), s("*"), nil), res("create", "", "pods", "eviction", "p"), true},
		{"resource does not cover its subresource", r(s("get"), s(""), s("pods"), nil), res("get", "", "pods", "log", "p"), false},
		{"subresource", r(s("get"), s(""), s("pods/log"), nil), res("get", "", "pods", "log", "p"), true},
		{"subresource not the resource", r(s("get"), s(""), s("pods/log"), nil), res("get", "", "pods", "", "p"), false},
		{"other subresource", r(s("get"), s(""), s("pods/log"), nil), res("get", "", "pods", "status", "p"), false},
		{"any resource's subresource", r(s("update"), s(""), s("*/scale"), nil), res("update", "", "replicationcontrollers", "scale", "x"), true},
		{"*/sub not the resource", r(s("update"), s(""), s("*/scale"), nil), res("update", "", "replicationcontrollers", "", "x"), false},
		{"*/sub other sub", r(s("update"), s(""), s("*/scale"), nil), res("update", "", "pods", "status", "x"), false},
		{"resourceNames match", r(s("get"), s(""), s("configmaps"), s("a", "b")), res("get", "", "configmaps", "", "b"), true},
		{"resourceNames other", r(s("get"), s(""), s("configmaps"), s("a")), res("get", "", "configmaps", "", "c"), false},
		{"resourceNames never a list", r(s("list"), s(""), s("configmaps"), s("a")), res("list", "", "configmaps", "", ""), false},
		{"resourceNames a list of one name", r(s("list"), s(""), s("configmaps"), s("a")), res("list", "", "configmaps", "", "a"), true},
		{"resource rule not a url", r(s("get"), s("*"), s("*"), nil), url("get", "/healthz"), false},
		{"url exact", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/version")}, url("get", "/version"), true},
		{"url exact only", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/version")}, url("get", "/version/x"), false},
		{"url prefix", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/apis/*")}, url("get", "/apis/rbac.authorization.k8s.io/v1"), true},
		{"url prefix needs its slash", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/apis/*")}, url("get", "/apis"), false},
		{"url wildcard", rbacv1.PolicyRule{Verbs: s("*"), NonResourceURLs: s("*")}, url("post", "/anything"), true},
		{"url verb", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("*")}, url("post", "/api"), false},
		{"url rule not a resource", rbacv1.PolicyRule{Verbs: s("*"), NonResourceURLs: s("*")}, res("get", "", "pods", "", ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ruleAllows(tt.a, &tt.rule); got != tt.want {
				t.Errorf("ruleAllows = %v, want %v", got, tt.want)
			}
		})
	}
}

// testPolicy: alice views namespace a through a RoleBinding to the view ClusterRole and edits configmaps
// in b through a Role; group ops are cluster admins; bob's binding names a role that does not exist.
func testPolicy() *policy {
	p := &policy{clusterRoles: map[string]*rbacv1.ClusterRole{}, roles: map[string]*rbacv1.Role{}, bindings: map[string][]*rbacv1.RoleBinding{}}
	for _, r := range defaultClusterRoles() {
		p.clusterRoles[r.Name] = r
	}
	p.clusterBindings = defaultClusterRoleBindings()
	p.clusterBindings = append(p.clusterBindings, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ops"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "ops"}},
	})
	user := func(n string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: n}}
	}
	p.roles["b/cm-editor"] = &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "cm-editor"},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get", "update"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"settings"}}},
	}
	p.bindings["a"] = []*rbacv1.RoleBinding{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "alice-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}, Subjects: user("alice"),
	}, {
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "bob-gone"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gone"}, Subjects: user("bob"),
	}, {
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "robot"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "robot"}},
	}}
	p.bindings["b"] = []*rbacv1.RoleBinding{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "alice-cm"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-editor"}, Subjects: user("alice"),
	}}
	return p
}

func TestPolicyAllows(t *testing.T) {
	alice := &userInfo{Name: "alice", Groups: []string{groupAuthenticated}}
	bob := &userInfo{Name: "bob", Groups: []string{groupAuthenticated}}
	carol := &userInfo{Name: "carol", Groups: []string{groupAuthenticated, "ops"}}
	anon := &userInfo{Name: "system:anonymous", Groups: []string{groupUnauthenticated}}
	robot := &userInfo{Name: "system:serviceaccount:a:robot", Groups: []string{groupAuthenticated}}
	res := func(u *userInfo, verb, resource, sub, ns, name string) attributes {
		return attributes{user: u, resourceRequest: true, verb: verb, resource: resource, sub: sub, ns: ns, name: name}
	}
	url := func(u *userInfo, path string) attributes { return attributes{user: u, verb: "get", path: path} }
	tests := []struct {
		name   string
		a      attributes
		want   bool
		reason string
	}{
		{"view lists pods in its namespace", res(alice, "list", "pods", "", "a", ""), true,
			`RBAC: allowed by RoleBinding "alice-view/a" of ClusterRole "view" to User "alice"`},
		{"view reads logs", res(alice, "get", "pods", "log", "a", "p"), true, ""},
		{"view does not create", res(alice, "create", "pods", "", "a", ""), false, ""},
		{"view does not evict", res(alice, "create", "pods", "eviction", "a", "p"), false, ""},
		{"view does not exec", res(alice, "create", "pods", "exec", "a", "p"), false, ""},
		{"view does not port-forward", res(alice, "create", "pods", "portforward", "a", "p"), false, ""},
		{"edit execs", res(robot, "create", "pods", "exec", "a", "p"), true, ""},
		{"edit attaches", res(robot, "create", "pods", "attach", "a", "p"), true, ""},
		{"view only in its namespace", res(alice, "list", "pods", "", "b", ""), false, ""},
		{"view of a namespace is not at the cluster scope", res(alice, "list", "pods", "", "", ""), false, ""},
		{"a Role in a RoleBinding", res(alice, "update", "configmaps", "", "b", "settings"), true,
			`RBAC: allowed by RoleBinding "alice-cm/b" of Role "cm-editor" to User "alice"`},
		{"a Role's resourceNames", res(alice, "update", "configmaps", "", "b", "other"), false, ""},
		{"a Role is its namespace's only", res(alice, "update", "configmaps", "", "a", "settings"), false, ""},
		{"cluster admin by group", res(carol, "delete", "nodes", "", "", "n1"), true,
			`RBAC: allowed by ClusterRoleBinding "ops" of ClusterRole "cluster-admin" to Group "ops"`},
		{"cluster admin anywhere", res(carol, "create", "pods", "eviction", "x", "p"), true, ""},
		{"service account in the binding's namespace", res(robot, "create", "pods", "", "a", ""), true,
			`RBAC: allowed by RoleBinding "robot/a" of ClusterRole "edit" to ServiceAccount "robot/a"`},
		{"missing role", res(bob, "get", "pods", "", "a", "p"), false, `RBAC: role.rbac.authorization.k8s.io "gone" not found`},
		{"authenticated discovery", url(alice, "/apis/rbac.authorization.k8s.io/v1"), true, ""},
		{"anonymous version", url(anon, "/version"), true, ""},
		{"anonymous no discovery", url(anon, "/api"), false, ""},
		{"basic user reviews itself", attributes{user: anon, resourceRequest: true, verb: "create", group: "authorization.k8s.io", resource: "selfsubjectaccessreviews"}, false, ""},
		{"basic user reviews itself (authenticated)", attributes{user: alice, resourceRequest: true, verb: "create", group: "authorization.k8s.io", resource: "selfsubjectaccessreviews"}, true, ""},
	}
	p := testPolicy()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := p.allows(tt.a)
			if got != tt.want || (tt.reason != "" && reason != tt.reason) {
				t.Errorf("allows = %v %q, want %v %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}

func TestForbiddenMessage(t *testing.T) {
	alice := &userInfo{Name: "alice"}
	tests := []struct {
		name string
		a    attributes
		want string
	}{
		{"namespaced", attributes{user: alice, resourceRequest: true, verb: "list", resource: "pods", ns: "default"},
			`pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default"`},
		{"named", attributes{user: alice, resourceRequest: true, verb: "get", resource: "pods", ns: "default", name: "p"},
			`pods "p" is forbidden: User "alice" cannot get resource "pods" in API group "" in the namespace "default"`},
		{"cluster scope", attributes{user: alice, resourceRequest: true, verb: "list", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
			`clusterroles.rbac.authorization.k8s.io is forbidden: User "alice" cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope`},
		{"subresource", attributes{user: alice, resourceRequest: true, verb: "create", resource: "pods", sub: "eviction", ns: "a", name: "p"},
			`pods "p" is forbidden: User "alice" cannot create resource "pods/eviction" in API group "" in the namespace "a"`},
		{"path", attributes{user: alice, verb: "get", path: "/apis"},
			`forbidden: User "alice" cannot get path "/apis"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := forbidden(tt.a, "")
			var se *apierrors.StatusError
			if !errors.As(err, &se) || se.ErrStatus.Code != 403 || se.ErrStatus.Reason != metav1.StatusReasonForbidden || se.ErrStatus.Message != tt.want {
				t.Errorf("forbidden = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestAttributesOf(t *testing.T) {
	tests := []struct {
		method, target string
		want           attributes
	}{
		{"GET", "/api/v1/namespaces/a/pods", attributes{resourceRequest: true, verb: "list", version: "v1", resource: "pods", ns: "a"}},
		{"GET", "/api/v1/namespaces/a/pods?watch=true", attributes{resourceRequest: true, verb: "watch", version: "v1", resource: "pods", ns: "a"}},
		{"GET", "/api/v1/watch/namespaces/a/pods", attributes{resourceRequest: true, verb: "watch", version: "v1", resource: "pods", ns: "a"}},
		{"GET", "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Dp", attributes{resourceRequest: true, verb: "list", version: "v1", resource: "pods", ns: "a", name: "p"}},
		{"GET", "/api/v1/namespaces/a/pods/p/log", attributes{resourceRequest: true, verb: "get", version: "v1", resource: "pods", sub: "log", ns: "a", name: "p"}},
		{"POST", "/api/v1/namespaces/a/pods/p/eviction", attributes{resourceRequest: true, verb: "create", version: "v1", resource: "pods", sub: "eviction", ns: "a", name: "p"}},
		// A WebSocket upgrade is a GET, still authorized as create.
		{"GET", "/api/v1/namespaces/a/pods/p/exec?command=sh", attributes{resourceRequest: true, verb: "create", version: "v1", resource: "pods", sub: "exec", ns: "a", name: "p"}},
		{"POST", "/api/v1/namespaces/a/pods/p/portforward", attributes{resourceRequest: true, verb: "create", version: "v1", resource: "pods", sub: "portforward", ns: "a", name: "p"}},
		{"GET", "/api/v1/namespaces/a/pods/p/attach", attributes{resourceRequest: true, verb: "create", version: "v1", resource: "pods", sub: "attach", ns: "a", name: "p"}},
		{"PATCH", "/api/v1/nodes/n1/status", attributes{resourceRequest: true, verb: "patch", version: "v1", resource: "nodes", sub: "status", name: "n1"}},
		{"PUT", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/roles/r", attributes{resourceRequest: true, verb: "update", group: "rbac.authorization.k8s.io", version: "v1", resource: "roles", ns: "a", name: "r"}},
		{"DELETE", "/api/v1/namespaces/a/configmaps", attributes{resourceRequest: true, verb: "deletecollection", version: "v1", resource: "configmaps", ns: "a"}},
		// A namespace is in itself, so a RoleBinding in it may allow reading it.
		{"GET", "/api/v1/namespaces/a", attributes{resourceRequest: true, verb: "get", version: "v1", resource: "namespaces", ns: "a", name: "a"}},
		{"PUT", "/api/v1/namespaces/a/finalize", attributes{resourceRequest: true, verb: "update", version: "v1", resource: "namespaces", sub: "finalize", ns: "a", name: "a"}},
		{"GET", "/api/v1", attributes{verb: "get", path: "/api/v1"}},
		{"GET", "/apis/rbac.authorization.k8s.io/v1", attributes{verb: "get", path: "/apis/rbac.authorization.k8s.io/v1"}},
		{"GET", "/openapi/v3/api/v1", attributes{verb: "get", path: "/openapi/v3/api/v1"}},
		{"POST", "/apis", attributes{verb: "post", path: "/apis"}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			got := attributesOf(httptest.NewRequest(tt.method, tt.target, nil), nil)
			if tt.want.resourceRequest {
				tt.want.path = got.path
			}
			if got != tt.want {
				t.Errorf("attributesOf = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRuleCovers(t *testing.T) {
	r := func(verbs, groups, resources, names []string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
	}
	s := func(v ...string) []string { return v }
	tests := []struct {
		name       string
		owner, sub rbacv1.PolicyRule
		want       bool
	}{
		{"same", r(s("get"), s(""), s("pods"), nil), r(s("get"), s(""), s("pods"), nil), true},
		{"wildcards", r(s("*"), s("*"), s("*"), nil), r(s("delete"), s("apps"), s("deployments/scale"), nil), true},
		{"other verb", r(s("get"), s(""), s("pods"), nil), r(s("list"), s(""), s("pods"), nil), false},
		{"*/sub covers a subresource", r(s("get"), s(""), s("*/status"), nil), r(s("get"), s(""), s("pods/status"), nil), true},
		{"*/sub not the resource", r(s("get"), s(""), s("*/status"), nil), r(s("get"), s(""), s("pods"), nil), false},
		{"named owner, unnamed sub", r(s("get"), s(""), s("pods"), s("p")), r(s("get"), s(""), s("pods"), nil), false},
		{"unnamed owner covers names", r(s("get"), s(""), s("pods"), nil), r(s("get"), s(""), s("pods"), s("p")), true},
		{"url prefix", rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/apis/*")}, rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/apis/x")}, true},
		{"resource rule not a url", r(s("*"), s("*"), s("*"), nil), rbacv1.PolicyRule{Verbs: s("get"), NonResourceURLs: s("/healthz")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ruleCovers(tt.owner, tt.sub); got != tt.want {
				t.Errorf("ruleCovers = %v, want %v", got, tt.want)
			}
		})
	}
}
