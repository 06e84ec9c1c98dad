package admission

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podtest"
	"github.com/podbus/podbus/internal/usage"
)

// usageReports are nodes' reports of n pods, 30 a node (the envelope's 150,000 on 5,000), one
// container each.
func usageReports(n int) []*nats.Msg {
	var msgs []*nats.Msg
	for first := 0; first < n; first += 30 {
		node := usage.Node{Name: fmt.Sprintf("node-%04d", first/30), Time: time.Now(), WindowMillis: 15000,
			CPUNanoCores: 1_500_000_000, MemoryBytes: 6 << 30}
		for i := first; i < min(n, first+30); i++ {
			p := podtest.RunningPod(i)
			md := p.GetMetadata()
			node.Pods = append(node.Pods, usage.Pod{Namespace: md.GetNamespace(), Name: md.GetName(), UID: md.GetUid(),
				Containers: []usage.Container{{Name: "web", CPUNanoCores: uint64(1_000_000 + i), MemoryBytes: uint64(20<<20 + i)}}})
		}
		data, err := usage.Encode(&usage.Report{Nodes: []usage.Node{node}})
		if err != nil {
			panic(err)
		}
		msgs = append(msgs, &nats.Msg{Subject: bus.SubjUsageNode(node.Name), Data: data})
	}
	return msgs
}

// BenchmarkUsageCachePods is what the usage cache keeps per pod: the reports are made before the
// first measure, so what grows is the cache alone.
func BenchmarkUsageCachePods(b *testing.B) {
	const n = 20000
	msgs := usageReports(n)
	for b.Loop() {
		before := podtest.HeapAlloc()
		c := newUsageCache()
		for _, m := range msgs {
			c.onMessage(m)
		}
		after := podtest.HeapAlloc()
		b.ReportMetric(float64(after-before)/n, "B/pod")
		runtime.KeepAlive(c)
	}
	runtime.KeepAlive(msgs)
}

// The cache answers a pod's usage as reported, and a pod that moved stays with its new node when
// the old one reports without it.
func TestUsageCachePods(t *testing.T) {
	c := newUsageCache()
	at := time.Now().Truncate(time.Second)
	report := func(node string, pods ...usage.Pod) {
		data, _ := usage.Encode(&usage.Report{Nodes: []usage.Node{{Name: node, Time: at, WindowMillis: 15000, CPUNanoCores: 9, Pods: pods}}})
		c.onMessage(natsMsg(bus.SubjUsageNode(node), data))
	}
	web := usage.Pod{Namespace: "ns", Name: "web", UID: "u1", Containers: []usage.Container{{Name: "a", CPUNanoCores: 1, MemoryBytes: 2},
		{Name: "b", CPUNanoCores: 3, MemoryBytes: 4}}}
	report("n1", web, usage.Pod{Namespace: "ns", Name: "idle"})
	p, n, ok := c.pod("ns", "web")
	if !ok || p.Namespace != "ns" || p.Name != "web" || fmt.Sprint(p.Containers) != fmt.Sprint(web.Containers) {
		t.Errorf("pod = %+v %v, want %+v", p, ok, web)
	}
	if n.Name != "n1" || !n.Time.Equal(at) || n.WindowMillis != 15000 {
		t.Errorf("pod's node = %+v", n)
	}
	if p, _, ok := c.pod("ns", "idle"); !ok || len(p.Containers) != 0 {
		t.Errorf("pod without containers = %+v %v", p, ok)
	}
	if n, ok := c.node("n1"); !ok || n.CPUNanoCores != 9 {
		t.Errorf("node = %+v %v", n, ok)
	}
	report("n2", web)
	report("n1")
	if _, n, ok := c.pod("ns", "web"); !ok || n.Name != "n2" {
		t.Errorf("moved pod on %q %v, want n2", n.Name, ok)
	}
	if _, _, ok := c.pod("ns", "idle"); ok {
		t.Errorf("pod its node left out still served")
	}
}
