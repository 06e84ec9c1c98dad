package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/pki"
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

// A user bound only to `view` in one namespace, with the real kubectl and a client certificate of the
// cluster's CA: it can list there, cannot create there nor read another namespace, gets kube's 403
// message, and kubectl auth can-i agrees with every answer.
func TestKubectlViewerInOneNamespace(t *testing.T) {
	needKubectl(t)
	dataDir := t.TempDir()
	cl, _ := startCluster(t, up.Config{DataDir: dataDir, Nodes: 1, StartDelay: 20 * time.Millisecond})
	admin := kube{t: t, kubeconfig: cl.Kubeconfig}
	adminCfg, err := pki.LoadKubeconfig(cl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.Open(filepath.Join(dataDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Client("alice", "alice", "developers")
	if err != nil {
		t.Fatal(err)
	}
	aliceCfg := filepath.Join(t.TempDir(), "alice")
	if err := pki.WriteKubeconfig(aliceCfg, "podbus", pki.Kubeconfig{Server: cl.APIURL, CA: adminCfg.CA, ClientCert: certPEM, ClientKey: keyPEM}); err != nil {
		t.Fatal(err)
	}
	alice := kube{t: t, kubeconfig: aliceCfg}

	admin.must("create", "namespace", "a")
	admin.must("create", "namespace", "b")
	admin.must("run", "web", "-n", "a", "--image=nginx")
	admin.must("create", "rolebinding", "alice-view", "-n", "a", "--clusterrole=view", "--user=alice")
	// The binding reaches the authorizer through its watch cache: wait for it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := alice.run("get", "pods", "-n", "a")
		if err == nil && strings.Contains(out, "web") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice cannot list pods in a: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tests := []struct {
		name   string
		args   []string // the request
		can    []string // the matching kubectl auth can-i
		ok     bool
		denied string // kube's 403 message when !ok
	}{
		{name: "list pods in a", args: []string{"get", "pods", "-n", "a"}, can: []string{"list", "pods", "-n", "a"}, ok: true},
		{name: "get a pod in a", args: []string{"get", "pod", "web", "-n", "a"}, can: []string{"get", "pods", "-n", "a"}, ok: true},
		{name: "create a pod in a", args: []string{"run", "x", "-n", "a", "--image=nginx"}, can: []string{"create", "pods", "-n", "a"},
			denied: `pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the namespace "a"`},
		{name: "delete a pod in a", args: []string{"delete", "pod", "web", "-n", "a"}, can: []string{"delete", "pods", "-n", "a"},
			denied: `pods "web" is forbidden: User "alice" cannot delete resource "pods" in API group "" in the namespace "a"`},
		{name: "list pods in b", args: []string{"get", "pods", "-n", "b"}, can: []string{"list", "pods", "-n", "b"},
			denied: `pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "b"`},
		{name: "list pods everywhere", args: []string{"get", "pods", "-A"}, can: []string{"list", "pods", "-A"},
			denied: `pods is forbidden: User "alice" cannot list resource "pods" in API group "" at the cluster scope`},
		{name: "list nodes", args: []string{"get", "nodes"}, can: []string{"list", "nodes"},
			denied: `nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope`},
		{name: "read a configmap in a", args: []string{"get", "configmaps", "-n", "a"}, can: []string{"list", "configmaps", "-n", "a"}, ok: true},
		{name: "bind herself more", args: []string{"create", "rolebinding", "more", "-n", "a", "--clusterrole=admin", "--user=alice"},
			can:    []string{"create", "rolebindings", "-n", "a"},
			denied: `rolebindings.rbac.authorization.k8s.io is forbidden: User "alice" cannot create resource "rolebindings" in API group "rbac.authorization.k8s.io" in the namespace "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := alice.run(tt.args...)
			if tt.ok && err != nil {
				t.Errorf("kubectl %v: %v\n%s", tt.args, err, out)
			}
			if !tt.ok && (err == nil || !strings.Contains(out, tt.denied)) {
				t.Errorf("kubectl %v: %v\n%s\nwant refused with %q", tt.args, err, out, tt.denied)
			}
			canOut, _ := alice.run(append([]string{"auth", "can-i"}, tt.can...)...)
			want := "no"
			if tt.ok {
				want = "yes"
			}
			// kubectl may print a warning first (a cluster-scoped resource asked in a namespace).
			lines := strings.Split(strings.TrimSpace(canOut), "\n")
			if lines[len(lines)-1] != want {
				t.Errorf("kubectl auth can-i %v: %q, want %q", tt.can, canOut, want)
			}
		})
	}
	// The pod alice could not delete is still there.
	admin.must("get", "pod", "web", "-n", "a")
}
