package admission

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/google/go-cmp/cmp"
	"github.com/podbus/podbus/bus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNamespaceLifecycle: the system namespaces exist, a new one is Active with the kubernetes
// finalizer, DELETE marks it Terminating, and creates into a missing or terminating namespace are
// refused as kube refuses them.
func TestNamespaceLifecycle(t *testing.T) {
	e := start(t, nil, false)
	resp, data := e.do("POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a"}}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	var ns corev1.Namespace
	_ = json.Unmarshal(data, &ns)
	if ns.Status.Phase != corev1.NamespaceActive || !cmp.Equal(ns.Spec.Finalizers, []corev1.FinalizerName{"kubernetes"}) ||
		ns.Labels["kubernetes.io/metadata.name"] != "team-a" {
		t.Errorf("created namespace = %s", data)
	}
	if resp, data := e.do("POST", "/api/v1/namespaces", `{"metadata":{"name":"Bad_Name"}}`); resp.StatusCode != 422 {
		t.Errorf("invalid name: %d %s", resp.StatusCode, data)
	}
	// An update may not drop the finalizer (only the controller does).
	if resp, data := e.do("PATCH", "/api/v1/namespaces/team-a", `{"spec":{"finalizers":null},"metadata":{"labels":{"x":"y"}}}`,
		"Content-Type: application/merge-patch+json"); resp.StatusCode != 200 || !strings.Contains(string(data), `"finalizers":["kubernetes"]`) ||
		!strings.Contains(string(data), `"x":"y"`) {
		t.Errorf("patch: %d %s", resp.StatusCode, data)
	}

	_, data = e.do("GET", "/api/v1/namespaces", "", tableAccept)
	var tbl metav1.Table
	_ = json.Unmarshal(data, &tbl)
	var cols, names []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	for _, r := range tbl.Rows {
		names = append(names, r.Cells[0].(string)+"/"+r.Cells[1].(string))
	}
	if d := cmp.Diff([]string{"Name", "Status", "Age"}, cols); d != "" {
		t.Errorf("columns:\n%s", d)
	}
	if d := cmp.Diff([]string{"default/Active", "kube-node-lease/Active", "kube-public/Active", "kube-system/Active", "team-a/Active"}, names); d != "" {
		t.Errorf("namespaces:\n%s", d)
	}

	if resp, data := e.do("POST", "/api/v1/namespaces/team-a/pods", podJSON("p")); resp.StatusCode != 201 {
		t.Fatalf("pod in team-a: %d %s", resp.StatusCode, data)
	}
	refusals := []struct {
		name, path, body string
		code             int
		reason           metav1.StatusReason
		message          string
	}{
		{"pod in missing namespace", "/api/v1/namespaces/nope/pods", podJSON("p"), 404, metav1.StatusReasonNotFound, `namespaces "nope" not found`},
		{"configmap in missing namespace", "/api/v1/namespaces/nope/configmaps", `{"metadata":{"name":"c"}}`, 404, metav1.StatusReasonNotFound, `namespaces "nope" not found`},
	}
	check := func() {
		t.Helper()
		for _, tt := range refusals {
			resp, data := e.do("POST", tt.path, tt.body)
			st := decodeStatus(t, data)
			if resp.StatusCode != tt.code || st.Reason != tt.reason || !strings.Contains(st.Message, tt.message) {
				t.Errorf("%s: %d %s", tt.name, resp.StatusCode, data)
			}
		}
	}
	check()

	if resp, data := e.do("DELETE", "/api/v1/namespaces/default", ""); resp.StatusCode != 403 {
		t.Errorf("delete default: %d %s", resp.StatusCode, data)
	}
	resp, data = e.do("DELETE", "/api/v1/namespaces/team-a", "")
	ns = corev1.Namespace{}
	_ = json.Unmarshal(data, &ns)
	if resp.StatusCode != 200 || ns.Status.Phase != corev1.NamespaceTerminating || ns.DeletionTimestamp == nil ||
		!cmp.Equal(ns.Spec.Finalizers, []corev1.FinalizerName{"kubernetes"}) {
		t.Errorf("delete: %d %s", resp.StatusCode, data)
	}
	// Admission reads namespaces from its watch cache, which takes the deletion in a moment after the
	// answer. A single GET reads the bucket, so wait for the cache itself to reach the deletion's revision.
	rv, err := strconv.ParseUint(ns.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("delete answered resourceVersion %q: %v", ns.ResourceVersion, err)
	}
	waitCacheRV(t, e, bus.BucketNamespaces, rv)
	if resp, data := e.do("DELETE", "/api/v1/namespaces/team-a", ""); resp.StatusCode != 409 {
		t.Errorf("second delete: %d %s", resp.StatusCode, data)
	}
	const terminating = "unable to create new content in namespace team-a because it is being terminated"
	refusals = append(refusals,
		struct {
			name, path, body string
			code             int
			reason           metav1.StatusReason
			message          string
		}{"pod in terminating namespace", "/api/v1/namespaces/team-a/pods", podJSON("q"), 403, metav1.StatusReasonForbidden, terminating},
		struct {
			name, path, body string
			code             int
			reason           metav1.StatusReason
			message          string
		}{"configmap in terminating namespace", "/api/v1/namespaces/team-a/configmaps", `{"metadata":{"name":"c"}}`, 403, metav1.StatusReasonForbidden, terminating},
	)
	check()
	// The pod already there stays until the namespace controller deletes it.
	if resp, _ := e.do("GET", "/api/v1/namespaces/team-a/pods/p", ""); resp.StatusCode != 200 {
		t.Errorf("pod in terminating namespace = %d", resp.StatusCode)
	}
}

// The namespace check of a create reads the watch cache: the bucket only for a namespace the cache
// does not hold, and a terminating namespace in the cache refuses as the stored one does.
func TestAdmitNamespaceFromCache(t *testing.T) {
	e := start(t, nil, false)
	resp, data := e.do("POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"cached"}}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	var ns corev1.Namespace
	_ = json.Unmarshal(data, &ns)
	rv, _ := strconv.ParseUint(ns.ResourceVersion, 10, 64)
	e.svc.cache(namespaceKind)
	waitCacheRV(t, e, bus.BucketNamespaces, rv)

	ctx := context.Background()
	reads := e.svc.kvReads.Load()
	if err := e.svc.admitNamespace(ctx, podKind, "p", "cached"); err != nil {
		t.Errorf("cached namespace: %v", err)
	}
	if n := e.svc.kvReads.Load() - reads; n != 0 {
		t.Errorf("%d reads of the bucket for a cached namespace, want none", n)
	}
	// Nor a decode: the phase is read from the cache's selectable fields.
	if a := testing.AllocsPerRun(100, func() { _ = e.svc.admitNamespace(ctx, podKind, "p", "cached") }); a != 0 {
		t.Errorf("%.0f allocations to admit into a cached namespace, want 0", a)
	}
	if err := e.svc.admitNamespace(ctx, podKind, "p", "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("missing namespace: %v, want NotFound", err)
	}
	if n := e.svc.kvReads.Load() - reads; n != 1 {
		t.Errorf("%d reads of the bucket for a namespace the cache lacks, want 1", n)
	}

	resp, data = e.do("DELETE", "/api/v1/namespaces/cached", "")
	if resp.StatusCode != 200 {
		t.Fatalf("delete: %d %s", resp.StatusCode, data)
	}
	_ = json.Unmarshal(data, &ns)
	rv, _ = strconv.ParseUint(ns.ResourceVersion, 10, 64)
	waitCacheRV(t, e, bus.BucketNamespaces, rv)
	reads = e.svc.kvReads.Load()
	if err := e.svc.admitNamespace(ctx, podKind, "p", "cached"); !apierrors.IsForbidden(err) {
		t.Errorf("terminating namespace: %v, want Forbidden", err)
	}
	if n := e.svc.kvReads.Load() - reads; n != 0 {
		t.Errorf("%d reads of the bucket for a cached terminating namespace, want none", n)
	}
}
