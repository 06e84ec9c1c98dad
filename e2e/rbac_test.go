package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/cluster/up"
)

// TestKubectlRBAC drives the RBAC kinds and kubectl auth can-i with the real kubectl, as the cluster's
// administrator: the default roles print like kube's, a binding is created the way users write them,
// and kubectl reads SelfSubjectAccessReview and SelfSubjectRulesReview answers.
func TestKubectlRBAC(t *testing.T) {
	needKubectl(t)
	cl, _ := startCluster(t, up.Config{Nodes: 1, StartDelay: 50 * time.Millisecond})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}

	out := k.must("get", "clusterroles")
	for _, want := range []string{"NAME", "CREATED AT", "cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user", "system:public-info-viewer"} {
		if !strings.Contains(out, want) {
			t.Errorf("get clusterroles lacks %q:\n%s", want, out)
		}
	}
	out = k.must("get", "clusterrolebindings")
	for _, want := range []string{"NAME", "ROLE", "AGE", "cluster-admin", "ClusterRole/cluster-admin", "ClusterRole/system:public-info-viewer"} {
		if !strings.Contains(out, want) {
			t.Errorf("get clusterrolebindings lacks %q:\n%s", want, out)
		}
	}

	k.must("create", "namespace", "a")
	k.must("create", "role", "pod-reader", "-n", "a", "--verb=get,list,watch", "--resource=pods,pods/log")
	k.must("create", "rolebinding", "alice-view", "-n", "a", "--clusterrole=view", "--user=alice")
	k.must("create", "rolebinding", "alice-pods", "-n", "a", "--role=pod-reader", "--user=alice", "--group=readers")
	out = k.must("get", "roles,rolebindings", "-n", "a", "-o", "wide")
	for _, want := range []string{"role.rbac.authorization.k8s.io/pod-reader", "rolebinding.rbac.authorization.k8s.io/alice-view",
		"ClusterRole/view", "Role/pod-reader", "USERS", "GROUPS", "readers"} {
		if !strings.Contains(out, want) {
			t.Errorf("get roles,rolebindings lacks %q:\n%s", want, out)
		}
	}
	// apply, first and repeated, of a Role and its binding.
	manifest := writeFile(t, "rbac.yaml", `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: cm-editor
  namespace: a
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, update]
  resourceNames: [settings]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: bob-cm
  namespace: a
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: cm-editor
subjects:
- kind: User
  name: bob
`)
	if out := k.must("apply", "-f", manifest); !strings.Contains(out, "role.rbac.authorization.k8s.io/cm-editor created") {
		t.Errorf("apply: %s", out)
	}
	// The binding's subjects get their apiGroup defaulted, which kubectl's patch of the atomic list may
	// send again; the role has nothing defaulted.
	if out := k.must("apply", "-f", manifest); !strings.Contains(out, "role.rbac.authorization.k8s.io/cm-editor unchanged") {
		t.Errorf("apply again: %s", out)
	}
	if out := k.must("describe", "clusterrole", "view"); !strings.Contains(out, "pods/log") || !strings.Contains(out, "[get list watch]") {
		t.Errorf("describe clusterrole view:\n%s", out)
	}
	// A binding's role cannot change.
	if out, err := k.run("patch", "rolebinding", "alice-view", "-n", "a", "--type=merge", "-p", `{"roleRef":{"name":"edit"}}`); err == nil || !strings.Contains(out, "immutable") {
		t.Errorf("patch roleRef: %v %s", err, out)
	}

	// The administrator (system:masters) may do anything; kubectl auth can-i says so.
	for _, args := range [][]string{{"create", "pods", "-n", "a"}, {"get", "pods/log"}, {"delete", "nodes"}, {"get", "/healthz"}} {
		if out := k.must(append([]string{"auth", "can-i"}, args...)...); !strings.HasSuffix(strings.TrimSpace(out), "yes") {
			t.Errorf("auth can-i %v = %q", args, out)
		}
	}
	out = k.must("auth", "can-i", "--list", "-n", "a")
	for _, want := range []string{"Resources", "Non-Resource URLs", "*.*", "[*]"} {
		if !strings.Contains(out, want) {
			t.Errorf("auth can-i --list lacks %q:\n%s", want, out)
		}
	}
}
