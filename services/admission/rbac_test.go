package admission

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// as makes a request header naming the test user.
func as(user string) string { return hdrTestUser + ": " + user }

// canI asks a SelfSubjectAccessReview as user.
func (e *env) canI(user string, ra authorizationv1.ResourceAttributes) bool {
	e.t.Helper()
	body, _ := json.Marshal(authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}})
	resp, data := e.do("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", string(body), as(user))
	var rev authorizationv1.SelfSubjectAccessReview
	if err := json.Unmarshal(data, &rev); resp.StatusCode != 201 || err != nil {
		e.t.Fatalf("review %+v: %d %s", ra, resp.StatusCode, data)
	}
	return rev.Status.Allowed
}

// TestRBACViewInOneNamespace: a user bound to view in namespace a lists pods there, cannot create
// them, cannot list them in b, and SelfSubjectAccessReview agrees with each answer.
func TestRBACViewInOneNamespace(t *testing.T) {
	e := start(t, nil, false)
	for _, ns := range []string{"a", "b"} {
		if resp, data := e.do("POST", "/api/v1/namespaces", `{"metadata":{"name":"`+ns+`"}}`); resp.StatusCode != 201 {
			t.Fatalf("create namespace %s: %d %s", ns, resp.StatusCode, data)
		}
	}
	if resp, data := e.do("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", `{"metadata":{"name":"alice-view"},
		"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"alice"}]}`); resp.StatusCode != 201 {
		t.Fatalf("create rolebinding: %d %s", resp.StatusCode, data)
	}
	// The authorizer reads the watch caches: the binding applies once they have it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, data := e.do("GET", "/api/v1/namespaces/a/pods", "", as("alice"))
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice list pods in a: %d %s", resp.StatusCode, data)
		}
		time.Sleep(20 * time.Millisecond)
	}

	tests := []struct {
		name, method, path, body string
		review                   authorizationv1.ResourceAttributes
		code                     int
		message                  string
	}{
		{"list in a", "GET", "/api/v1/namespaces/a/pods", "",
			authorizationv1.ResourceAttributes{Namespace: "a", Verb: "list", Resource: "pods"}, 200, ""},
		{"logs in a", "GET", "/api/v1/namespaces/a/pods/p/log", "",
			authorizationv1.ResourceAttributes{Namespace: "a", Verb: "get", Resource: "pods", Subresource: "log", Name: "p"}, 404, ""},
		{"get namespace a", "GET", "/api/v1/namespaces/a", "",
			authorizationv1.ResourceAttributes{Namespace: "a", Verb: "get", Resource: "namespaces", Name: "a"}, 200, ""},
		{"create in a", "POST", "/api/v1/namespaces/a/pods", podJSON("p"),
			authorizationv1.ResourceAttributes{Namespace: "a", Verb: "create", Resource: "pods"}, 403,
			`pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the namespace "a"`},
		{"evict in a", "POST", "/api/v1/namespaces/a/pods/p/eviction", `{}`,
			authorizationv1.ResourceAttributes{Namespace: "a", Verb: "create", Resource: "pods", Subresource: "eviction", Name: "p"}, 403,
			`pods "p" is forbidden: User "alice" cannot create resource "pods/eviction" in API group "" in the namespace "a"`},
		{"list in b", "GET", "/api/v1/namespaces/b/pods", "",
			authorizationv1.ResourceAttributes{Namespace: "b", Verb: "list", Resource: "pods"}, 403,
			`pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "b"`},
		{"watch in b", "GET", "/api/v1/namespaces/b/pods?watch=true", "",
			authorizationv1.ResourceAttributes{Namespace: "b", Verb: "watch", Resource: "pods"}, 403,
			`pods is forbidden: User "alice" cannot watch resource "pods" in API group "" in the namespace "b"`},
		{"list everywhere", "GET", "/api/v1/pods", "",
			authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, 403,
			`pods is forbidden: User "alice" cannot list resource "pods" in API group "" at the cluster scope`},
		{"list rolebindings in a", "GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/a/rolebindings", "",
			authorizationv1.ResourceAttributes{Namespace: "a", Verb: "list", Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}, 403,
			`rolebindings.rbac.authorization.k8s.io is forbidden: User "alice" cannot list resource "rolebindings" in API group "rbac.authorization.k8s.io" in the namespace "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do(tt.method, tt.path, tt.body, as("alice"))
			if resp.StatusCode != tt.code {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, resp.StatusCode, data, tt.code)
			}
			if tt.code == 403 {
				var st metav1.Status
				_ = json.Unmarshal(data, &st)
				if st.Kind != "Status" || st.Reason != metav1.StatusReasonForbidden || st.Message != tt.message {
					t.Errorf("403 = %s, want message %q", data, tt.message)
				}
			}
			if got, want := e.canI("alice", tt.review), tt.code != 403; got != want {
				t.Errorf("SelfSubjectAccessReview %+v allowed = %v, want %v", tt.review, got, want)
			}
		})
	}

	// Rules review: what kubectl auth can-i --list shows.
	resp, data := e.do("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", `{"spec":{"namespace":"a"}}`, as("alice"))
	var rr authorizationv1.SelfSubjectRulesReview
	_ = json.Unmarshal(data, &rr)
	var got []string
	for _, r := range rr.Status.ResourceRules {
		got = append(got, strings.Join(r.Verbs, ",")+" "+strings.Join(r.APIGroups, ",")+" "+strings.Join(r.Resources, ","))
	}
	want := []string{
		"create authorization.k8s.io selfsubjectaccessreviews,selfsubjectrulesreviews",
		"get,list,watch  pods,configmaps",
		"get,list,watch  pods/status,namespaces/status,pods/log",
		"get,list,watch  namespaces",
		"get,list,watch  events",
		"get,list,watch apps daemonsets,daemonsets/status",
		"get,list,watch policy poddisruptionbudgets,poddisruptionbudgets/status",
		"get,list,watch metrics.k8s.io pods,nodes",
		"get,list,watch apps deployments,replicasets,deployments/scale,replicasets/scale,deployments/status,replicasets/status",
	}
	if resp.StatusCode != 201 || rr.Status.Incomplete || len(rr.Status.NonResourceRules) == 0 {
		t.Errorf("rules review: %d %s", resp.StatusCode, data)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rules review resource rules (-want +got):\n%s", d)
	}
	// A review names one kind of attributes.
	if resp, data := e.do("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", `{"spec":{}}`, as("alice")); resp.StatusCode != 422 {
		t.Errorf("empty review: %d %s", resp.StatusCode, data)
	}
}

// TestRBACKinds: the RBAC kinds validate as kube does, keep roleRef, and print like kube.
func TestRBACKinds(t *testing.T) {
	e := start(t, nil, false)
	const rbac = "/apis/rbac.authorization.k8s.io/v1"
	for _, tt := range []struct {
		name, path, body string
		field            string
	}{
		{"rule without verbs", rbac + "/clusterroles", `{"metadata":{"name":"x"},"rules":[{"apiGroups":[""],"resources":["pods"]}]}`, "rules[0].verbs"},
		{"rule without resources", rbac + "/clusterroles", `{"metadata":{"name":"x"},"rules":[{"verbs":["get"],"apiGroups":[""]}]}`, "rules[0].resources"},
		{"url in a Role", rbac + "/namespaces/default/roles", `{"metadata":{"name":"x"},"rules":[{"verbs":["get"],"nonResourceURLs":["/x"]}]}`, "rules[0].nonResourceURLs"},
		{"url and resources", rbac + "/clusterroles", `{"metadata":{"name":"x"},"rules":[{"verbs":["get"],"resources":["pods"],"nonResourceURLs":["/x"]}]}`, "rules[0].nonResourceURLs"},
		{"roleRef kind", rbac + "/namespaces/default/rolebindings", `{"metadata":{"name":"x"},"roleRef":{"kind":"Pod","name":"view"}}`, "roleRef.kind"},
		{"Role in a ClusterRoleBinding", rbac + "/clusterrolebindings", `{"metadata":{"name":"x"},"roleRef":{"kind":"Role","name":"view"}}`, "roleRef.kind"},
		{"roleRef group", rbac + "/clusterrolebindings", `{"metadata":{"name":"x"},"roleRef":{"apiGroup":"apps","kind":"ClusterRole","name":"view"}}`, "roleRef.apiGroup"},
		{"subject kind", rbac + "/clusterrolebindings", `{"metadata":{"name":"x"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"Robot","name":"r"}]}`, "subjects[0].kind"},
		{"service account namespace", rbac + "/clusterrolebindings", `{"metadata":{"name":"x"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"ServiceAccount","name":"r"}]}`, "subjects[0].namespace"},
		{"name with a slash", rbac + "/clusterroles", `{"metadata":{"name":"a%2Fb"},"rules":[]}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do("POST", tt.path, tt.body)
			if resp.StatusCode != 422 || !strings.Contains(string(data), tt.field) {
				t.Errorf("create = %d %s, want 422 on %s", resp.StatusCode, data, tt.field)
			}
		})
	}

	// Names are path segments: a ClusterRole may be called system:something.
	if resp, data := e.do("POST", rbac+"/clusterroles", `{"metadata":{"name":"system:podbus-reader"},"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["pods"]}]}`); resp.StatusCode != 201 {
		t.Fatalf("create clusterrole: %d %s", resp.StatusCode, data)
	}
	resp, data := e.do("POST", rbac+"/namespaces/default/rolebindings", `{"metadata":{"name":"readers"},
		"roleRef":{"kind":"ClusterRole","name":"system:podbus-reader"},"subjects":[{"kind":"Group","name":"readers"},{"kind":"User","name":"dan"}]}`)
	if resp.StatusCode != 201 || !strings.Contains(string(data), `{"kind":"Group","apiGroup":"rbac.authorization.k8s.io"`) {
		t.Fatalf("create rolebinding (apiGroups defaulted): %d %s", resp.StatusCode, data)
	}
	resp, data = e.do("PATCH", rbac+"/namespaces/default/rolebindings/readers", `{"roleRef":{"name":"admin"}}`, "Content-Type: application/merge-patch+json")
	if resp.StatusCode != 422 || !strings.Contains(string(data), "roleRef") || !strings.Contains(string(data), "field is immutable") {
		t.Errorf("change roleRef = %d %s, want 422 immutable", resp.StatusCode, data)
	}
	resp, data = e.do("PATCH", rbac+"/namespaces/default/rolebindings/readers", `{"subjects":[{"kind":"User","name":"erin"}]}`, "Content-Type: application/merge-patch+json")
	if resp.StatusCode != 200 {
		t.Errorf("change subjects = %d %s", resp.StatusCode, data)
	}

	// Tables: kubectl get rolebindings,clusterroles.
	for _, tt := range []struct {
		path    string
		columns []string
		row     string
	}{
		{rbac + "/namespaces/default/rolebindings", []string{"Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"}, "readers ClusterRole/system:podbus-reader"},
		{rbac + "/clusterrolebindings", []string{"Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"}, "cluster-admin ClusterRole/cluster-admin"},
		{rbac + "/clusterroles", []string{"Name", "Created At"}, "admin "},
	} {
		resp, data := e.do("GET", tt.path, "", tableAccept)
		var tab metav1.Table
		_ = json.Unmarshal(data, &tab)
		var cols []string
		for _, c := range tab.ColumnDefinitions {
			cols = append(cols, c.Name)
		}
		if resp.StatusCode != 200 || !cmp.Equal(cols, tt.columns) || len(tab.Rows) == 0 {
			t.Fatalf("table %s: %d %s", tt.path, resp.StatusCode, data)
		}
		first := fmt.Sprint(tab.Rows[0].Cells[0]) + " "
		if len(tab.Rows[0].Cells) > 2 {
			first += fmt.Sprint(tab.Rows[0].Cells[1])
		}
		if !strings.HasPrefix(first, tt.row) {
			t.Errorf("table %s first row %v, want %q", tt.path, tab.Rows[0].Cells, tt.row)
		}
	}
}

// TestRBACBootstrap: the default roles and bindings exist after start, and a second replica's start
// keeps them as they are.
func TestRBACBootstrap(t *testing.T) {
	e := start(t, nil, true)
	const rbac = "/apis/rbac.authorization.k8s.io/v1"
	for _, name := range []string{"cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user", "system:public-info-viewer"} {
		resp, data := e.do("GET", rbac+"/clusterroles/"+name, "")
		if resp.StatusCode != 200 || !strings.Contains(string(data), `"rbac.authorization.kubernetes.io/autoupdate":"true"`) {
			t.Errorf("clusterrole %s: %d %s", name, resp.StatusCode, data)
		}
	}
	for _, name := range []string{"cluster-admin", "system:discovery", "system:basic-user", "system:public-info-viewer"} {
		if resp, data := e.do("GET", rbac+"/clusterrolebindings/"+name, ""); resp.StatusCode != 200 {
			t.Errorf("clusterrolebinding %s: %d %s", name, resp.StatusCode, data)
		}
	}
	_, before := e.do("GET", rbac+"/clusterroles/view", "")
	if err := e.svc.bootstrapPolicy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, after := e.do("GET", rbac+"/clusterroles/view", ""); string(after) != string(before) {
		t.Errorf("bootstrap again changed view:\n%s\n%s", before, after)
	}

	// An administrator's changes: view loses its first rule and gains one; edit is pinned with
	// autoupdate "false" and loses its rules; a subject is removed from system:basic-user.
	patch := func(path, body string) {
		t.Helper()
		if resp, data := e.do("PATCH", rbac+path, body, "Content-Type: application/json-patch+json"); resp.StatusCode != 200 {
			t.Fatalf("patch %s: %d %s", path, resp.StatusCode, data)
		}
	}
	patch("/clusterroles/view", `[{"op":"remove","path":"/rules/0"},{"op":"add","path":"/rules/-","value":{"verbs":["get"],"apiGroups":[""],"resources":["nodes"]}}]`)
	patch("/clusterroles/edit", `[{"op":"replace","path":"/rules","value":[]},{"op":"replace","path":"/metadata/annotations/rbac.authorization.kubernetes.io~1autoupdate","value":"false"}]`)
	patch("/clusterrolebindings/system:basic-user", `[{"op":"replace","path":"/subjects","value":[{"kind":"User","name":"dan","apiGroup":"rbac.authorization.k8s.io"}]}]`)
	if err := e.svc.bootstrapPolicy(t.Context()); err != nil {
		t.Fatal(err)
	}
	get := func(path string, v any) {
		t.Helper()
		_, data := e.do("GET", rbac+path, "")
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatal(err)
		}
	}
	var view, edit rbacv1.ClusterRole
	get("/clusterroles/view", &view)
	var got []string
	for _, r := range view.Rules {
		got = append(got, strings.Join(append(r.Resources, r.NonResourceURLs...), ","))
	}
	if want := []string{"pods/status,namespaces/status,pods/log", "namespaces", "events", "/ui,/ui/*", "daemonsets,daemonsets/status",
		"poddisruptionbudgets,poddisruptionbudgets/status", "pods,nodes", "deployments,replicasets,deployments/scale,replicasets/scale,deployments/status,replicasets/status", "nodes", "pods,configmaps"}; !cmp.Equal(got, want) {
		t.Errorf("view after bootstrap: %v, want %v", got, want)
	}
	if get("/clusterroles/edit", &edit); len(edit.Rules) != 0 {
		t.Errorf("pinned edit was reconciled: %v", edit.Rules)
	}
	var basic rbacv1.ClusterRoleBinding
	get("/clusterrolebindings/system:basic-user", &basic)
	if len(basic.Subjects) != 2 || basic.Subjects[0].Name != "dan" || basic.Subjects[1].Name != groupAuthenticated {
		t.Errorf("system:basic-user subjects after bootstrap: %v", basic.Subjects)
	}
}

// TestRBACEscalation: an admin of one namespace grants what it holds there, not more, unless it may
// bind or escalate.
func TestRBACEscalation(t *testing.T) {
	e := start(t, nil, false)
	const rbac = "/apis/rbac.authorization.k8s.io/v1"
	for _, body := range []string{
		`{"metadata":{"name":"a"}}`,
	} {
		if resp, data := e.do("POST", "/api/v1/namespaces", body); resp.StatusCode != 201 {
			t.Fatalf("create namespace: %d %s", resp.StatusCode, data)
		}
	}
	for _, b := range []struct{ path, body string }{
		{rbac + "/namespaces/a/rolebindings", `{"metadata":{"name":"alice-admin"},"roleRef":{"kind":"ClusterRole","name":"admin"},"subjects":[{"kind":"User","name":"alice"}]}`},
		{rbac + "/clusterroles", `{"metadata":{"name":"node-reader"},"rules":[{"verbs":["get"],"apiGroups":[""],"resources":["nodes"]}]}`},
		{rbac + "/clusterroles", `{"metadata":{"name":"binder"},"rules":[{"verbs":["bind"],"apiGroups":["rbac.authorization.k8s.io"],"resources":["clusterroles"],"resourceNames":["node-reader"]}]}`},
		{rbac + "/clusterrolebindings", `{"metadata":{"name":"bob-binder"},"roleRef":{"kind":"ClusterRole","name":"binder"},"subjects":[{"kind":"User","name":"bob"}]}`},
		{rbac + "/clusterrolebindings", `{"metadata":{"name":"bob-ns"},"roleRef":{"kind":"ClusterRole","name":"admin"},"subjects":[{"kind":"User","name":"bob"}]}`},
	} {
		if resp, data := e.do("POST", b.path, b.body); resp.StatusCode != 201 {
			t.Fatalf("create %s: %d %s", b.path, resp.StatusCode, data)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	// Every binding above must be in the authorizer's view, the last one (bob-ns) included.
	for e.canI("alice", authorizationv1.ResourceAttributes{Namespace: "a", Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}) == false ||
		e.canI("bob", authorizationv1.ResourceAttributes{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "node-reader"}) == false ||
		e.canI("bob", authorizationv1.ResourceAttributes{Namespace: "a", Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}) == false {
		if time.Now().After(deadline) {
			t.Fatal("bindings never applied")
		}
		time.Sleep(20 * time.Millisecond)
	}
	tests := []struct {
		name, user, path, body string
		code                   int
		message                string
	}{
		{"admin binds view in its namespace", "alice", rbac + "/namespaces/a/rolebindings",
			`{"metadata":{"name":"carol-view"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"carol"}]}`, 201, ""},
		{"admin writes a role it holds", "alice", rbac + "/namespaces/a/roles",
			`{"metadata":{"name":"pod-reader"},"rules":[{"verbs":["get","list"],"apiGroups":[""],"resources":["pods","pods/log"]}]}`, 201, ""},
		{"admin cannot bind cluster-admin", "alice", rbac + "/namespaces/a/rolebindings",
			`{"metadata":{"name":"carol-root"},"roleRef":{"kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"User","name":"carol"}]}`, 403,
			`rolebindings.rbac.authorization.k8s.io "carol-root" is forbidden: user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:["*"], Resources:["*"], Verbs:["*"]}
{NonResourceURLs:["*"], Verbs:["*"]}`},
		{"admin cannot write a role beyond its own", "alice", rbac + "/namespaces/a/roles",
			`{"metadata":{"name":"node-writer"},"rules":[{"verbs":["get","delete"],"apiGroups":[""],"resources":["nodes","pods"]}]}`, 403,
			`roles.rbac.authorization.k8s.io "node-writer" is forbidden: user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["nodes"], Verbs:["get" "delete"]}`},
		{"bind verb allows binding what it does not hold", "bob", rbac + "/namespaces/a/rolebindings",
			`{"metadata":{"name":"dan-nodes"},"roleRef":{"kind":"ClusterRole","name":"node-reader"},"subjects":[{"kind":"User","name":"dan"}]}`, 201, ""},
		{"bind verb for that role only", "bob", rbac + "/namespaces/a/rolebindings",
			`{"metadata":{"name":"dan-root"},"roleRef":{"kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"User","name":"dan"}]}`, 403, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do("POST", tt.path, tt.body, as(tt.user))
			if resp.StatusCode != tt.code {
				t.Fatalf("create = %d %s, want %d", resp.StatusCode, data, tt.code)
			}
			var st metav1.Status
			_ = json.Unmarshal(data, &st)
			if tt.message != "" && st.Message != tt.message {
				t.Errorf("message:\n%s\nwant:\n%s", st.Message, tt.message)
			}
		})
	}
}
