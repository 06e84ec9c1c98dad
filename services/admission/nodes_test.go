package admission

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// kwokNode is a node registered straight through the API, as kwok does.
const kwokNode = `apiVersion: v1
kind: Node
metadata:
  name: kw1
  labels: {topology.kubernetes.io/zone: zone-a}
spec:
  taints: [{key: dedicated, value: gpu, effect: NoSchedule}]
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110", example.com/gpu: "2"}
  allocatable: {cpu: "8", memory: 32Gi, pods: "110", example.com/gpu: "2"}
  conditions: [{type: Ready, status: "True", reason: KubeletReady}]
`

func TestNodeWrites(t *testing.T) {
	e := start(t, nil, true)
	resp, data := e.do("POST", "/api/v1/nodes?fieldValidation=Strict", kwokNode, "Content-Type: application/yaml")
	if resp.StatusCode != 201 {
		t.Fatalf("create = %d %s", resp.StatusCode, data)
	}
	var created map[string]any
	_ = json.Unmarshal(data, &created)
	if get(created, "metadata", "uid") == "" || get(created, "status", "capacity", "example.com/gpu") != "2" ||
		get(created, "spec", "taints", 0, "effect") != "NoSchedule" || get(created, "status", "conditions", 0, "status") != "True" {
		t.Fatalf("created node %s", data)
	}
	if resp, data := e.do("POST", "/api/v1/nodes", kwokNode, "Content-Type: application/yaml"); resp.StatusCode != 409 || !strings.Contains(string(data), "AlreadyExists") {
		t.Errorf("duplicate create = %d %s", resp.StatusCode, data)
	}

	const (
		smp   = "Content-Type: application/strategic-merge-patch+json"
		merge = "Content-Type: application/merge-patch+json"
		jp    = "Content-Type: application/json-patch+json"
	)
	tests := []struct {
		name, method, path, ctype, body string
		check                           func(n map[string]any) bool
	}{
		{name: "taint (strategic merge, as kubectl taint)", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: smp,
			body:  `{"spec":{"taints":[{"key":"dedicated","value":"gpu","effect":"NoSchedule"},{"key":"maint","effect":"NoExecute"}]}}`,
			check: func(n map[string]any) bool { return get(n, "spec", "taints", 1, "key") == "maint" }},
		{name: "label (merge patch, as kubectl label)", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: merge,
			body:  `{"metadata":{"labels":{"team":"blue"}}}`,
			check: func(n map[string]any) bool { return get(n, "metadata", "labels", "team") == "blue" }},
		{name: "cordon (json patch)", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: jp,
			body:  `[{"op":"add","path":"/spec/unschedulable","value":true}]`,
			check: func(n map[string]any) bool { return get(n, "spec", "unschedulable") == true }},
		{name: "status through the main resource is ignored", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: merge,
			body:  `{"status":{"capacity":{"cpu":"99"}}}`,
			check: func(n map[string]any) bool { return get(n, "status", "capacity", "cpu") == "8" }},
		{name: "status subresource", method: "PATCH", path: "/api/v1/nodes/kw1/status", ctype: merge,
			body: `{"metadata":{"labels":{"ignored":"x"}},"spec":{"unschedulable":false},"status":{"capacity":{"cpu":"16"}}}`,
			check: func(n map[string]any) bool {
				return get(n, "status", "capacity", "cpu") == "16" && get(n, "spec", "unschedulable") == true && get(n, "metadata", "labels", "ignored") == nil
			}},
		{name: "uncordon (strategic merge)", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: smp,
			body:  `{"spec":{"unschedulable":null}}`,
			check: func(n map[string]any) bool { return get(n, "spec", "unschedulable") == nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do(tt.method, tt.path+"?fieldValidation=Strict", tt.body, tt.ctype)
			if resp.StatusCode != 200 {
				t.Fatalf("got %d %s", resp.StatusCode, data)
			}
			var n map[string]any
			_ = json.Unmarshal(data, &n)
			if !tt.check(n) {
				t.Errorf("answered node %s", data)
			}
			_, data = e.do("GET", "/api/v1/nodes/kw1", "")
			n = nil
			_ = json.Unmarshal(data, &n)
			if !tt.check(n) {
				t.Errorf("stored node %s", data)
			}
		})
	}

	// PUT of the whole object, with its resourceVersion as precondition.
	_, data = e.do("GET", "/api/v1/nodes/kw1", "")
	put := strings.Replace(string(data), `"team":"blue"`, `"team":"green"`, 1)
	if resp, data := e.do("PUT", "/api/v1/nodes/kw1", put); resp.StatusCode != 200 || !strings.Contains(string(data), `"team":"green"`) {
		t.Fatalf("PUT = %d %s", resp.StatusCode, data)
	}
	if resp, data := e.do("PUT", "/api/v1/nodes/kw1", put); resp.StatusCode != 409 || !strings.Contains(string(data), "Conflict") {
		t.Errorf("PUT with a stale resourceVersion = %d %s", resp.StatusCode, data)
	}

	// Concurrent patches without a resourceVersion all land: a lost compare-and-set is retried.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, data := e.do("PATCH", "/api/v1/nodes/kw1", fmt.Sprintf(`{"metadata":{"labels":{"c%d":"x"}}}`, i), merge); resp.StatusCode != 200 {
				t.Errorf("concurrent patch %d = %d %s", i, resp.StatusCode, data)
			}
		}()
	}
	wg.Wait()
	_, data = e.do("GET", "/api/v1/nodes/kw1", "")
	var n map[string]any
	_ = json.Unmarshal(data, &n)
	for i := range 8 {
		if get(n, "metadata", "labels", fmt.Sprintf("c%d", i)) != "x" {
			t.Errorf("label c%d lost: %s", i, data)
		}
	}

	errTests := []struct {
		name, method, path, ctype, body string
		code                            int
		reason                          metav1.StatusReason
		causes                          []string
	}{
		{name: "bad taint effect", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: smp,
			body: `{"spec":{"taints":[{"key":"a","effect":"Sometimes"}]}}`, code: 422, reason: metav1.StatusReasonInvalid,
			causes: []string{"spec.taints[0].effect"}},
		{name: "taint without effect", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: smp,
			body: `{"spec":{"taints":[{"key":"a"}]}}`, code: 422, reason: metav1.StatusReasonInvalid, causes: []string{"spec.taints[0].effect"}},
		{name: "bad taint key", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: smp,
			body: `{"spec":{"taints":[{"key":"a b","effect":"NoSchedule"}]}}`, code: 422, reason: metav1.StatusReasonInvalid,
			causes: []string{"spec.taints[0].key"}},
		{name: "duplicate taint", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: smp,
			body: `{"spec":{"taints":[{"key":"a","effect":"NoSchedule"},{"key":"a","value":"v","effect":"NoSchedule"}]}}`,
			code: 422, reason: metav1.StatusReasonInvalid, causes: []string{"spec.taints[1]"}},
		{name: "bad label value", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: merge,
			body: `{"metadata":{"labels":{"team":"not ok!"}}}`, code: 422, reason: metav1.StatusReasonInvalid,
			causes: []string{"metadata.labels"}},
		{name: "bad label on create", method: "POST", path: "/api/v1/nodes", ctype: "Content-Type: application/json",
			body: `{"metadata":{"name":"kw2","labels":{"-x":"y"}}}`, code: 422, reason: metav1.StatusReasonInvalid,
			causes: []string{"metadata.labels"}},
		{name: "stale resourceVersion", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: merge,
			body: `{"metadata":{"resourceVersion":"1","labels":{"a":"b"}}}`, code: 409, reason: metav1.StatusReasonConflict},
		{name: "patch missing node", method: "PATCH", path: "/api/v1/nodes/nope", ctype: merge,
			body: `{"metadata":{"labels":{"a":"b"}}}`, code: 404, reason: metav1.StatusReasonNotFound},
		{name: "name mismatch", method: "PATCH", path: "/api/v1/nodes/kw1", ctype: merge,
			body: `{"metadata":{"name":"other"}}`, code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "delete missing node", method: "DELETE", path: "/api/v1/nodes/nope", code: 404, reason: metav1.StatusReasonNotFound},
		{name: "namespaced node URL", method: "GET", path: "/api/v1/namespaces/default/nodes/kw1", code: 404, reason: metav1.StatusReasonNotFound},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			var headers []string
			if tt.ctype != "" {
				headers = append(headers, tt.ctype)
			}
			resp, data := e.do(tt.method, tt.path, tt.body, headers...)
			var st metav1.Status
			_ = json.Unmarshal(data, &st)
			if resp.StatusCode != tt.code || st.Reason != tt.reason {
				t.Fatalf("got %d %s, want %d %s: %s", resp.StatusCode, st.Reason, tt.code, tt.reason, data)
			}
			var fields []string
			if st.Details != nil {
				for _, c := range st.Details.Causes {
					fields = append(fields, c.Field)
				}
			}
			for _, want := range tt.causes {
				if !strings.Contains(strings.Join(fields, " "), want) {
					t.Errorf("causes %v lack %s", fields, want)
				}
			}
		})
	}

	if resp, data := e.do("DELETE", "/api/v1/nodes/kw1", ""); resp.StatusCode != 200 || !strings.Contains(string(data), "Success") {
		t.Fatalf("DELETE = %d %s", resp.StatusCode, data)
	}
	if resp, _ := e.do("GET", "/api/v1/nodes/kw1", ""); resp.StatusCode != 404 {
		t.Errorf("node still there: %d", resp.StatusCode)
	}
	// The name is free again.
	if resp, data := e.do("POST", "/api/v1/nodes", kwokNode, "Content-Type: application/yaml"); resp.StatusCode != 201 {
		t.Errorf("create again = %d %s", resp.StatusCode, data)
	}
}

// An eviction (what kubectl drain sends) is a graceful delete with the eviction's options and reason.
func TestEviction(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("p")
	e.setPod("default", "p", func(p *pb.Pod) { p.Spec.NodeName = "n1" })
	body := `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p","namespace":"default"},"deleteOptions":{"gracePeriodSeconds":5}}`
	resp, data := e.do("POST", "/api/v1/namespaces/default/pods/p/eviction", body)
	if resp.StatusCode != 201 || !strings.Contains(string(data), `"status":"Success"`) {
		t.Fatalf("eviction = %d %s", resp.StatusCode, data)
	}
	cmd, _ := e.store.lastCommand()
	if cmd.GetOp() != pb.PodCommand_OP_DELETE || cmd.GetGracePeriodSeconds() != 5 || cmd.GetReason() != "Eviction" {
		t.Errorf("delete command %v", cmd)
	}
	for _, tt := range []struct {
		name, path, body string
		code             int
	}{
		{"missing pod", "/api/v1/namespaces/default/pods/nope/eviction", `{"metadata":{"name":"nope"}}`, 404},
		{"name mismatch", "/api/v1/namespaces/default/pods/p/eviction", `{"metadata":{"name":"q"}}`, 400},
		{"wrong group", "/api/v1/namespaces/default/pods/p/eviction", `{"apiVersion":"v1","metadata":{"name":"p"}}`, 400},
	} {
		if resp, data := e.do("POST", tt.path, tt.body); resp.StatusCode != tt.code {
			t.Errorf("%s: %d %s, want %d", tt.name, resp.StatusCode, data, tt.code)
		}
	}
	if resp, _ := e.do("GET", "/api/v1/namespaces/default/pods/p/eviction", ""); resp.StatusCode != 405 {
		t.Errorf("GET eviction = %d, want 405", resp.StatusCode)
	}
}
