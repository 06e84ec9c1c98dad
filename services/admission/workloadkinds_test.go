package admission

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

const dsBody = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"logs"},"spec":{
 "selector":{"matchLabels":{"app":"logs"}},
 "template":{"metadata":{"labels":{"app":"logs"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`

func TestDaemonSetKind(t *testing.T) {
	e := start(t, nil, true)
	const base = "/apis/apps/v1/namespaces/default/daemonsets"
	resp, data := e.do("POST", base, dsBody)
	var ds appsv1.DaemonSet
	if resp.StatusCode != 201 || json.Unmarshal(data, &ds) != nil {
		t.Fatalf("create = %d %s", resp.StatusCode, data)
	}
	if ds.Generation != 1 || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType ||
		ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 || ds.Spec.Template.Spec.RestartPolicy != "Always" {
		t.Errorf("defaults not applied: %+v", ds.Spec)
	}
	for _, tc := range []struct{ name, body, field string }{
		{"selector does not match", strings.Replace(dsBody, `"labels":{"app":"logs"}`, `"labels":{"app":"other"}`, 1), "spec.template.metadata.labels"},
		{"no containers", strings.Replace(dsBody, `"containers":[{"name":"c","image":"busybox"}]`, `"containers":[]`, 1), "spec.template.spec.containers"},
		{"bad strategy", strings.Replace(dsBody, `"selector"`, `"updateStrategy":{"type":"Sometimes"},"selector"`, 1), "spec.updateStrategy.type"},
	} {
		body := strings.Replace(tc.body, `"name":"logs"`, `"name":"bad"`, 1)
		resp, data := e.do("POST", base, body)
		if resp.StatusCode != 422 || !strings.Contains(string(data), tc.field) {
			t.Errorf("%s: %d %s, want 422 on %s", tc.name, resp.StatusCode, data, tc.field)
		}
	}
	// The status subresource changes status alone; a spec change bumps the generation.
	resp, data = e.do("PATCH", base+"/logs/status", `{"status":{"desiredNumberScheduled":3},"spec":{"minReadySeconds":9}}`,
		"Content-Type: application/merge-patch+json")
	if resp.StatusCode != 200 || json.Unmarshal(data, &ds) != nil || ds.Status.DesiredNumberScheduled != 3 || ds.Spec.MinReadySeconds != 0 {
		t.Fatalf("status patch = %d %s", resp.StatusCode, data)
	}
	resp, data = e.do("PATCH", base+"/logs", `{"spec":{"minReadySeconds":9},"status":{"desiredNumberScheduled":0}}`,
		"Content-Type: application/merge-patch+json")
	if resp.StatusCode != 200 || json.Unmarshal(data, &ds) != nil || ds.Generation != 2 || ds.Status.DesiredNumberScheduled != 3 {
		t.Fatalf("spec patch = %d %s", resp.StatusCode, data)
	}
	resp, data = e.do("GET", base, "", "Accept: application/json;as=Table;v=v1;g=meta.k8s.io")
	for _, c := range []string{`"name":"Desired"`, `"name":"Up-to-date"`, `"name":"Node Selector"`} {
		if resp.StatusCode != 200 || !strings.Contains(string(data), c) {
			t.Errorf("table lacks %s: %s", c, data)
		}
	}
}

// Concurrent evictions against a budget allowing one disruption: one succeeds and names its pod in
// disruptedPods, the other is refused with 429, as kube-apiserver does.
func TestEvictionBudget(t *testing.T) {
	e := start(t, nil, false)
	const pdbs = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
	if resp, data := e.do("POST", pdbs, `{"metadata":{"name":"web"},"spec":{"minAvailable":2,"maxUnavailable":1}}`); resp.StatusCode != 422 {
		t.Errorf("both minAvailable and maxUnavailable = %d %s, want 422", resp.StatusCode, data)
	}
	if resp, data := e.do("POST", pdbs, `{"metadata":{"name":"web"},"spec":{"minAvailable":2,"selector":{"matchLabels":{"app":"web"}}}}`); resp.StatusCode != 201 {
		t.Fatalf("create pdb = %d %s", resp.StatusCode, data)
	}
	for _, name := range []string{"a", "b", "c"} {
		e.mustCreate(name)
		e.setPod("default", name, func(p *pb.Pod) {
			p.Spec.NodeName = "n1"
			p.Status.Phase = "Running"
			p.Status.Conditions = []*pb.PodCondition{{Type: "Ready", Status: "True"}}
		})
	}
	evict := func(pod string) (int, string) {
		resp, data := e.do("POST", "/api/v1/namespaces/default/pods/"+pod+"/eviction", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"`+pod+`"}}`)
		return resp.StatusCode, string(data)
	}
	// Not yet seen by the disruption controller: refused.
	if code, data := evict("a"); code != 429 || !strings.Contains(data, "still being processed") {
		t.Errorf("eviction before the controller = %d %s", code, data)
	}
	status := `{"status":{"observedGeneration":1,"disruptionsAllowed":1,"currentHealthy":3,"desiredHealthy":2,"expectedPods":3}}`
	if resp, data := e.do("PATCH", pdbs+"/web/status", status, "Content-Type: application/merge-patch+json"); resp.StatusCode != 200 {
		t.Fatalf("status = %d %s", resp.StatusCode, data)
	}
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, pod := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, data := evict(pod)
			mu.Lock()
			defer mu.Unlock()
			codes[code]++
			if code == 429 && !strings.Contains(data, "Cannot evict pod as it would violate the pod's disruption budget.") {
				t.Errorf("429 message: %s", data)
			}
		}()
	}
	wg.Wait()
	if codes[201] != 1 || codes[429] != 1 {
		t.Fatalf("concurrent evictions: %v, want one 201 and one 429", codes)
	}
	_, data := e.do("GET", pdbs+"/web", "")
	var pdb policyv1.PodDisruptionBudget
	if json.Unmarshal(data, &pdb) != nil || pdb.Status.DisruptionsAllowed != 0 || len(pdb.Status.DisruptedPods) != 1 {
		t.Errorf("budget after the eviction: %s", data)
	}
	// A pod that is not running disrupts nothing.
	e.setPod("default", "c", func(p *pb.Pod) { p.Status.Phase = "Pending" })
	if code, data := evict("c"); code != 201 {
		t.Errorf("evict pending pod = %d %s", code, data)
	}
}

// A delete with propagationPolicy Foreground or Orphan leaves the object deleting with the collector's
// finalizer; an update that removes the last finalizer completes the deletion; Background deletes.
func TestDeletePropagationFinalizers(t *testing.T) {
	e := start(t, nil, true)
	const cms = "/api/v1/namespaces/default/configmaps"
	for _, tc := range []struct{ policy, finalizer string }{
		{"Foreground", "foregroundDeletion"}, {"Orphan", "orphan"}, {"Background", ""},
	} {
		name := strings.ToLower(tc.policy)
		if resp, data := e.do("POST", cms, `{"metadata":{"name":"`+name+`"}}`); resp.StatusCode != 201 {
			t.Fatalf("create = %d %s", resp.StatusCode, data)
		}
		resp, data := e.do("DELETE", cms+"/"+name, `{"propagationPolicy":"`+tc.policy+`"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%s delete = %d %s", tc.policy, resp.StatusCode, data)
		}
		resp, data = e.do("GET", cms+"/"+name, "")
		if tc.finalizer == "" {
			if resp.StatusCode != 404 {
				t.Errorf("background: still there: %s", data)
			}
			continue
		}
		if resp.StatusCode != 200 || !strings.Contains(string(data), `"finalizers":["`+tc.finalizer+`"]`) || !strings.Contains(string(data), "deletionTimestamp") {
			t.Fatalf("%s: %d %s", tc.policy, resp.StatusCode, data)
		}
		if resp, data := e.do("PATCH", cms+"/"+name, `{"metadata":{"finalizers":null}}`, "Content-Type: application/merge-patch+json"); resp.StatusCode != 200 {
			t.Fatalf("remove finalizer = %d %s", resp.StatusCode, data)
		}
		if resp, data := e.do("GET", cms+"/"+name, ""); resp.StatusCode != 404 {
			t.Errorf("%s: not gone once its finalizers are: %s", tc.policy, data)
		}
	}
	if resp, data := e.do("POST", cms, `{"metadata":{"name":"x"}}`); resp.StatusCode != 201 {
		t.Fatalf("create = %d %s", resp.StatusCode, data)
	}
	if resp, data := e.do("DELETE", cms+"/x", `{"propagationPolicy":"Sometimes"}`); resp.StatusCode != 400 {
		t.Errorf("bad policy = %d %s, want 400", resp.StatusCode, data)
	}
}
