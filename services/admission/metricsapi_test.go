package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/usage"
)

func (e *env) publishUsage(subject string, nodes ...usage.Node) {
	e.t.Helper()
	data, err := usage.Encode(&usage.Report{Nodes: nodes})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.conn.NC.Publish(subject, data); err != nil {
		e.t.Fatal(err)
	}
	if err := e.conn.NC.Flush(); err != nil {
		e.t.Fatal(err)
	}
}

// metricsList GETs a metrics list and returns its items by name, failing on anything but 200.
func (e *env) metricsList(path string) map[string]map[string]any {
	e.t.Helper()
	resp, data := e.do("GET", "/apis/metrics.k8s.io/v1beta1"+path, "")
	if resp.StatusCode != 200 {
		e.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
	}
	var l struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, it := range l.Items {
		out[get(it, "metadata", "name").(string)] = it
	}
	return out
}

// The API serves the agents' latest usage as metrics.k8s.io PodMetrics and NodeMetrics, selected by
// the pods' and nodes' labels; a node's own subject cannot report another node, and a pool cannot
// report a node that reports itself.
func TestMetricsAPI(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("web-1", `labels={"app":"web"}`)
	e.mustCreate("db-1", `labels={"app":"db"}`)
	for _, n := range []string{`{"metadata":{"name":"n1","labels":{"zone":"a"}}}`, `{"metadata":{"name":"n2","labels":{"zone":"b"}}}`} {
		if resp, data := e.do("POST", "/api/v1/nodes", n); resp.StatusCode != 201 {
			t.Fatalf("create node: %d %s", resp.StatusCode, data)
		}
	}
	// Metrics are listed from the watch caches, which may lag the creates (as metrics-server's do).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range []string{"pods", "nodes"} {
		if err := e.svc.cache(e.svc.reg.lookup("", "v1", r)).fresh(ctx); err != nil {
			t.Fatalf("%s cache: %v", r, err)
		}
	}
	now := time.Now().Truncate(time.Second)
	n1 := usage.Node{Name: "n1", Time: now, WindowMillis: 15000, CPUNanoCores: 1_500_000_000, MemoryBytes: 2 << 30,
		Pods: []usage.Pod{
			{Namespace: "default", Name: "web-1", Containers: []usage.Container{{Name: "c", CPUNanoCores: 250_000_000, MemoryBytes: 64 << 20}}},
			{Namespace: "default", Name: "db-1", Containers: []usage.Container{{Name: "c", CPUNanoCores: 5_000_000, MemoryBytes: 1 << 30}}},
		}}
	e.publishUsage(bus.SubjUsageNode("n1"), n1, usage.Node{Name: "n2", CPUNanoCores: 9}) // n2 foreign here
	e.publishUsage(bus.SubjUsagePool("sim"), usage.Node{Name: "n2", Time: now, WindowMillis: 15000, CPUNanoCores: 7_000_000, MemoryBytes: 1 << 20},
		usage.Node{Name: "n1", CPUNanoCores: 1}) // n1 reports itself
	deadline := time.Now().Add(10 * time.Second)
	for len(e.svc.usage.usageNodes()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("usage cache holds %v", e.svc.usage.usageNodes())
		}
		time.Sleep(10 * time.Millisecond)
	}

	pods := e.metricsList("/namespaces/default/pods?labelSelector=app%3Dweb")
	if len(pods) != 1 || pods["web-1"] == nil {
		t.Fatalf("pods app=web: %v", pods)
	}
	web := pods["web-1"]
	if get(web, "kind") != "PodMetrics" || get(web, "window") != "15s" || get(web, "timestamp") != now.UTC().Format(time.RFC3339) ||
		get(web, "metadata", "labels", "app") != "web" {
		t.Errorf("web-1 metrics %v", web)
	}
	if c := get(web, "containers", 0); get(c, "name") != "c" || get(c, "usage", "cpu") != "250m" || get(c, "usage", "memory") != "64Mi" {
		t.Errorf("web-1 container %v", c)
	}
	if all := e.metricsList("/pods"); len(all) != 2 {
		t.Errorf("pods in all namespaces: %v", all)
	}
	if resp, data := e.do("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/db-1", ""); resp.StatusCode != 200 {
		t.Errorf("get db-1: %d %s", resp.StatusCode, data)
	}
	if resp, data := e.do("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope", ""); resp.StatusCode != 404 {
		t.Errorf("get nope: %d %s", resp.StatusCode, data)
	}

	nodes := e.metricsList("/nodes")
	if len(nodes) != 2 || get(nodes["n1"], "usage", "cpu") != "1500m" || get(nodes["n1"], "usage", "memory") != "2Gi" ||
		get(nodes["n2"], "usage", "cpu") != "7m" {
		t.Errorf("nodes: %v", nodes)
	}
	if b := e.metricsList("/nodes?labelSelector=zone%3Db"); len(b) != 1 || b["n2"] == nil {
		t.Errorf("nodes zone=b: %v", b)
	}
	if resp, data := e.do("GET", "/apis/metrics.k8s.io/v1beta1/nodes/n1", ""); resp.StatusCode != 200 {
		t.Errorf("get n1: %d %s", resp.StatusCode, data)
	}

	for _, tt := range []struct {
		name, method, path string
		code               int
		headers            []string
	}{
		{"watch", "GET", "/apis/metrics.k8s.io/v1beta1/pods?watch=1", 405, nil},
		{"delete", "DELETE", "/apis/metrics.k8s.io/v1beta1/nodes/n1", 405, nil},
		{"no RBAC", "GET", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods", 403, []string{hdrTestUser + ": carol"}},
	} {
		if resp, data := e.do(tt.method, tt.path, "", tt.headers...); resp.StatusCode != tt.code {
			t.Errorf("%s: %d %s, want %d", tt.name, resp.StatusCode, data, tt.code)
		}
	}
}

func TestUsageCacheExpires(t *testing.T) {
	c := newUsageCache()
	now := time.Now()
	c.now = func() time.Time { return now }
	data, _ := usage.Encode(&usage.Report{Nodes: []usage.Node{{Name: "n1",
		Pods: []usage.Pod{{Namespace: "ns", Name: "p"}}}}})
	c.onMessage(natsMsg(bus.SubjUsageNode("n1"), data))
	if _, ok := c.node("n1"); !ok {
		t.Fatal("n1 not cached")
	}
	// A later report without the pod drops it.
	data, _ = usage.Encode(&usage.Report{Nodes: []usage.Node{{Name: "n1"}}})
	c.onMessage(natsMsg(bus.SubjUsageNode("n1"), data))
	if _, _, ok := c.pod("ns", "p"); ok {
		t.Error("pod kept after its node's report left it out")
	}
	now = now.Add(usageTTL + time.Second)
	if _, ok := c.node("n1"); ok {
		t.Error("n1 served after usageTTL")
	}
	c.onMessage(natsMsg(bus.SubjUsageNode("n1"), []byte("not json")))
}

func natsMsg(subject string, data []byte) *nats.Msg { return &nats.Msg{Subject: subject, Data: data} }

// usagePods is every pod the cache serves, "ns/name" -> "node:container=cpu/mem,...".
func usagePods(c *usageCache) map[string]string {
	out := map[string]string{}
	c.mu.Lock()
	keys := make([]string, 0, len(c.pods))
	for k := range c.pods {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	for _, k := range keys {
		ns, name, _ := strings.Cut(k, "/")
		p, n, ok := c.pod(ns, name)
		if !ok {
			continue
		}
		s := n.Name + ":"
		for _, ct := range p.Containers {
			s += fmt.Sprintf("%s=%d/%d,", ct.Name, ct.CPUNanoCores, ct.MemoryBytes)
		}
		out[k] = s
	}
	return out
}

func usagePod(name string, cpu uint64, containers ...string) usage.Pod {
	p := usage.Pod{Namespace: "ns", Name: name}
	for _, c := range containers {
		p.Containers = append(p.Containers, usage.Container{Name: c, CPUNanoCores: cpu, MemoryBytes: 2 * cpu})
	}
	return p
}

// Each node's report replaces what its last one said of its pods, however the two differ.
func TestUsageCacheReports(t *testing.T) {
	first := []usage.Pod{usagePod("a", 1, "app"), usagePod("b", 1, "app", "side"), usagePod("c", 1, "app")}
	tests := []struct {
		name string
		n1   []usage.Pod // n1's second report
		n2   []usage.Pod // n2's report, after it
		want map[string]string
	}{
		{"same pods, new figures", []usage.Pod{usagePod("a", 5, "app"), usagePod("b", 6, "app", "side"), usagePod("c", 7, "app")}, nil,
			map[string]string{"ns/a": "n1:app=5/10,", "ns/b": "n1:app=6/12,side=6/12,", "ns/c": "n1:app=7/14,"}},
		{"one left out", []usage.Pod{usagePod("a", 5, "app"), usagePod("c", 7, "app")}, nil,
			map[string]string{"ns/a": "n1:app=5/10,", "ns/c": "n1:app=7/14,"}},
		{"the last left out", []usage.Pod{usagePod("a", 5, "app"), usagePod("b", 6, "app", "side")}, nil,
			map[string]string{"ns/a": "n1:app=5/10,", "ns/b": "n1:app=6/12,side=6/12,"}},
		{"one added, order changed", []usage.Pod{usagePod("d", 8, "app"), usagePod("c", 7, "app"), usagePod("a", 5, "app"), usagePod("b", 6, "app", "side")}, nil,
			map[string]string{"ns/a": "n1:app=5/10,", "ns/b": "n1:app=6/12,side=6/12,", "ns/c": "n1:app=7/14,", "ns/d": "n1:app=8/16,"}},
		{"other containers", []usage.Pod{usagePod("a", 5, "web"), usagePod("b", 6, "side", "app"), usagePod("c", 7)}, nil,
			map[string]string{"ns/a": "n1:web=5/10,", "ns/b": "n1:side=6/12,app=6/12,", "ns/c": "n1:"}},
		{"none", nil, nil, map[string]string{}},
		{"moved to n2 before n1 reports", []usage.Pod{usagePod("a", 5, "app")}, []usage.Pod{usagePod("b", 9, "app")},
			map[string]string{"ns/a": "n1:app=5/10,", "ns/b": "n2:app=9/18,"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newUsageCache()
			report := func(node string, pods []usage.Pod) {
				data, err := usage.Encode(&usage.Report{Nodes: []usage.Node{{Name: node, Pods: pods}}})
				if err != nil {
					t.Fatal(err)
				}
				c.onMessage(natsMsg(bus.SubjUsagePool("host"), data))
			}
			report("n1", first)
			if tt.n2 != nil {
				report("n2", tt.n2)
			}
			report("n1", tt.n1)
			if d := cmp.Diff(tt.want, usagePods(c)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// A pod's usage as served is a copy: the next report does not change what a reader holds.
func TestUsageCacheServesCopies(t *testing.T) {
	c := newUsageCache()
	for _, cpu := range []uint64{1, 2} {
		data, _ := usage.Encode(&usage.Report{Nodes: []usage.Node{{Name: "n1", Pods: []usage.Pod{usagePod("a", cpu, "app")}}}})
		c.onMessage(natsMsg(bus.SubjUsageNode("n1"), data))
		if cpu == 1 {
			p, _, _ := c.pod("ns", "a")
			defer func() {
				if got := p.Containers[0].CPUNanoCores; got != 1 {
					t.Errorf("a reader's copy changed to %d", got)
				}
			}()
		}
	}
}

// A node's report of the same pods allocates nothing per pod.
func TestUsageCacheAllocations(t *testing.T) {
	c := newUsageCache()
	var pods []usage.Pod
	for i := range 500 {
		pods = append(pods, usagePod(fmt.Sprintf("pod-%d", i), uint64(i), "app"))
	}
	data, err := usage.Encode(&usage.Report{Nodes: []usage.Node{{Name: "n1", Pods: pods}}})
	if err != nil {
		t.Fatal(err)
	}
	m := natsMsg(bus.SubjUsagePool("host"), data)
	c.onMessage(m)
	if allocs := testing.AllocsPerRun(20, func() { c.onMessage(m) }); allocs > 5 {
		t.Errorf("%.0f allocations for a report of 500 pods the cache has", allocs)
	}
	// Agents list a node's pods in any order: the keys' list is made again, nothing per pod.
	slices.Reverse(pods)
	data, err = usage.Encode(&usage.Report{Nodes: []usage.Node{{Name: "n1", Pods: pods}}})
	if err != nil {
		t.Fatal(err)
	}
	reordered := natsMsg(bus.SubjUsagePool("host"), data)
	flip := false
	if allocs := testing.AllocsPerRun(20, func() {
		if flip = !flip; flip {
			c.onMessage(reordered)
		} else {
			c.onMessage(m)
		}
	}); allocs > 6 {
		t.Errorf("%.0f allocations for a reordered report of 500 pods the cache has", allocs)
	}
	if len(usagePods(c)) != 500 {
		t.Errorf("%d pods cached", len(usagePods(c)))
	}
}
