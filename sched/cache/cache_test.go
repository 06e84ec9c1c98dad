package cache

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestCache() (*Cache, *clock) {
	clk := &clock{t: time.Unix(1000, 0)}
	return New(Options{Now: clk.now}), clk
}

func names(s *framework.Snapshot) []string {
	var out []string
	for _, n := range s.Nodes() {
		out = append(out, n.Name())
	}
	return out
}

func requested(t *testing.T, c *Cache, node string) *pb.Resources {
	t.Helper()
	snap, _ := c.Snapshot()
	ni := snap.Get(node)
	if ni == nil {
		t.Fatalf("node %s not in snapshot", node)
	}
	return ni.Requested.Proto()
}

func alloc(node string, pods map[string]*pb.Resources) *pb.NodeAllocation {
	a := &pb.NodeAllocation{Node: node, Pods: map[string]*pb.PodAllocation{}, Total: &pb.Resources{}}
	for uid, r := range pods {
		a.Pods[uid] = &pb.PodAllocation{Name: uid, Namespace: "default", Requests: r}
		a.Total.MilliCpu += r.MilliCpu
		a.Total.Memory += r.Memory
		a.Total.Pods += r.Pods
	}
	return a
}

func TestSnapshotIsSortedAndCopyOnWrite(t *testing.T) {
	c, _ := newTestCache()
	c.UpsertNode(st.Node("b").Capacity("4", "8Gi", 110).Obj(), 1)
	c.UpsertNode(st.Node("c").Obj(), 2)
	c.UpsertNode(st.Node("a").Obj(), 3)
	s1, _ := c.Snapshot()
	if diff := cmp.Diff([]string{"a", "b", "c"}, names(s1)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if s2, _ := c.Snapshot(); s2 != s1 {
		t.Error("unchanged cache rebuilt its snapshot")
	}
	c.RemoveNode("b", 4)
	c.UpsertNode(st.Node("d").Obj(), 5)
	if err := c.Assume(st.Pod("p", "u1").Req("1", "").Info(), "a", 1); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, names(s1)); diff != "" {
		t.Errorf("old snapshot changed (-want +got):\n%s", diff)
	}
	if s1.Get("a").Requested.MilliCPU != 0 {
		t.Error("old snapshot sees the assumption")
	}
	s3, _ := c.Snapshot()
	if diff := cmp.Diff([]string{"a", "c", "d"}, names(s3)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s3.Get("a").Requested.MilliCPU != 1000 {
		t.Error("new snapshot misses the assumption")
	}
}

func TestAssumptionLifecycle(t *testing.T) {
	pod := st.Pod("p", "u1").Req("1", "1Gi").Info()
	tests := []struct {
		name  string
		after func(c *Cache, clk *clock)
		want  *pb.Resources // requested on n1 afterwards
	}{
		{"assumed counts", func(*Cache, *clock) {}, &pb.Resources{MilliCpu: 1000, Memory: 1 << 30, Pods: 1}},
		{"alloc record lists the pod: counted once", func(c *Cache, _ *clock) {
			c.UpsertAlloc("n1", alloc("n1", map[string]*pb.Resources{"u1": pod.Requests}), 7)
		}, &pb.Resources{MilliCpu: 1000, Memory: 1 << 30, Pods: 1}},
		{"alloc record of another pod: both count", func(c *Cache, _ *clock) {
			c.UpsertAlloc("n1", alloc("n1", map[string]*pb.Resources{"u2": {MilliCpu: 500, Pods: 1}}), 7)
		}, &pb.Resources{MilliCpu: 1500, Memory: 1 << 30, Pods: 2}},
		{"forgotten", func(c *Cache, _ *clock) { c.Forget("u1") }, &pb.Resources{}},
		{"expired after the TTL", func(c *Cache, clk *clock) {
			clk.t = clk.t.Add(DefaultAssumeTTL + time.Second)
			if n := c.Cleanup(); n != 1 {
				t.Errorf("expired %d", n)
			}
		}, &pb.Resources{}},
		{"not expired before the TTL", func(c *Cache, clk *clock) {
			clk.t = clk.t.Add(DefaultAssumeTTL - time.Second)
			c.Cleanup()
		}, &pb.Resources{MilliCpu: 1000, Memory: 1 << 30, Pods: 1}},
		{"assumed again elsewhere: moves", func(c *Cache, _ *clock) {
			if err := c.Assume(pod, "n2", 2); err != nil {
				t.Fatal(err)
			}
		}, &pb.Resources{}},
		{"committed on another node: dropped here", func(c *Cache, _ *clock) {
			c.UpsertAlloc("n2", alloc("n2", map[string]*pb.Resources{"u1": pod.Requests}), 9)
		}, &pb.Resources{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newTestCache()
			c.UpsertNode(st.Node("n1").Capacity("4", "8Gi", 110).Obj(), 1)
			c.UpsertNode(st.Node("n2").Capacity("4", "8Gi", 110).Obj(), 2)
			if err := c.Assume(pod, "n1", 1); err != nil {
				t.Fatal(err)
			}
			tt.after(c, clk)
			if diff := cmp.Diff(tt.want, requested(t, c, "n1"), protocmp.Transform()); diff != "" {
				t.Errorf("requested (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssumeUnknownNode(t *testing.T) {
	c, _ := newTestCache()
	if err := c.Assume(st.Pod("p", "u").Info(), "nope", 1); !errors.Is(err, ErrNodeNotFound) {
		t.Errorf("err = %v", err)
	}
}

func TestAssumedSeq(t *testing.T) {
	c, _ := newTestCache()
	c.UpsertNode(st.Node("n1").Obj(), 1)
	_ = c.Assume(st.Pod("p", "u").Info(), "n1", 42)
	node, seq, ok := c.Assumed("u")
	if !ok || node != "n1" || seq != 42 {
		t.Errorf("Assumed = %q %d %v", node, seq, ok)
	}
}

func TestNonZeroRequested(t *testing.T) {
	c, _ := newTestCache()
	c.UpsertNode(st.Node("n1").Capacity("4", "8Gi", 110).Obj(), 1)
	c.UpsertAlloc("n1", alloc("n1", map[string]*pb.Resources{"a": {Pods: 1}, "b": {MilliCpu: 500, Memory: 1 << 30, Pods: 1}}), 1)
	_ = c.Assume(st.Pod("p", "u").Info(), "n1", 1)
	snap, _ := c.Snapshot()
	ni := snap.Get("n1")
	if ni.NonZeroMilliCPU != 100+500+100 || ni.NonZeroMemory != 200<<20+1<<30+200<<20 {
		t.Errorf("non-zero requested = %d, %d", ni.NonZeroMilliCPU, ni.NonZeroMemory)
	}
}

func TestTriggers(t *testing.T) {
	base := func() *st.NodeWrapper {
		return st.Node("n1").Capacity("4", "8Gi", 110).Label("zone", "a").Ready()
	}
	node := func(a framework.ActionType) framework.ClusterEvent {
		return framework.ClusterEvent{Resource: framework.Node, ActionType: a}
	}
	pod := func(a framework.ActionType) framework.ClusterEvent {
		return framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: a}
	}
	tests := []struct {
		name      string
		apply     func(c *Cache) Change
		want      string
		wantEvent framework.ClusterEvent
	}{
		{"new node", func(c *Cache) Change { return c.UpsertNodeChange(st.Node("n2").Obj(), 10) }, "n10", node(framework.Add)},
		{"heartbeat only", func(c *Cache) Change {
			n := base().Obj()
			n.Status.Conditions[0].Reason = "KubeletReady"
			return c.UpsertNodeChange(n, 10)
		}, "", framework.ClusterEvent{}},
		{"allocatable", func(c *Cache) Change { return c.UpsertNodeChange(base().Capacity("8", "8Gi", 110).Obj(), 10) }, "n10", node(framework.UpdateNodeAllocatable)},
		{"labels", func(c *Cache) Change { return c.UpsertNodeChange(base().Label("zone", "b").Obj(), 10) }, "n10", node(framework.UpdateNodeLabel)},
		{"taints", func(c *Cache) Change { return c.UpsertNodeChange(base().Taint("k", "v", "NoSchedule").Obj(), 10) }, "n10", node(framework.UpdateNodeTaint)},
		{"unschedulable", func(c *Cache) Change { return c.UpsertNodeChange(base().Unschedulable().Obj(), 10) }, "n10", node(framework.UpdateNodeTaint)},
		{"ready", func(c *Cache) Change { return c.UpsertNodeChange(base().Condition("Ready", "False").Obj(), 10) }, "n10", node(framework.UpdateNodeCondition)},
		{"labels and taints", func(c *Cache) Change {
			return c.UpsertNodeChange(base().Label("zone", "b").Taint("k", "v", "NoSchedule").Obj(), 10)
		}, "n10", node(framework.UpdateNodeLabel | framework.UpdateNodeTaint)},
		{"node removed", func(c *Cache) Change { c.RemoveNode("n1", 10); return Change{} }, "", framework.ClusterEvent{}},
		{"alloc grows", func(c *Cache) Change {
			return c.UpsertAllocChange("n1", alloc("n1", map[string]*pb.Resources{"x": {Pods: 1}, "y": {Pods: 1}}), 10)
		}, "p10", pod(framework.Add)}, // only pods waiting for pod affinity or spread care
		{"alloc unchanged pods", func(c *Cache) Change {
			return c.UpsertAllocChange("n1", alloc("n1", map[string]*pb.Resources{"x": {Pods: 1}}), 10)
		}, "", framework.ClusterEvent{}},
		{"alloc swaps a pod", func(c *Cache) Change {
			return c.UpsertAllocChange("n1", alloc("n1", map[string]*pb.Resources{"y": {Pods: 1}}), 10)
		}, "a10", pod(framework.Add | framework.Delete)},
		{"alloc shrinks", func(c *Cache) Change {
			return c.UpsertAllocChange("n1", alloc("n1", map[string]*pb.Resources{}), 10)
		}, "a10", pod(framework.Delete)},
		{"alloc removed", func(c *Cache) Change { return c.RemoveAllocChange("n1", 10) }, "a10", pod(framework.Delete)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestCache()
			c.UpsertNode(base().Obj(), 1)
			c.UpsertAlloc("n1", alloc("n1", map[string]*pb.Resources{"x": {Pods: 1}}), 1)
			before, _ := c.Changes()
			ch := tt.apply(c)
			got := ch.Trigger
			if got != tt.want {
				t.Errorf("trigger = %q, want %q", got, tt.want)
			}
			if ch.Event != tt.wantEvent {
				t.Errorf("event = %v, want %v", ch.Event, tt.wantEvent)
			}
			after, last := c.Changes()
			if (got != "") != (after != before) || (got != "" && last != got) {
				t.Errorf("changes %d -> %d, last %q", before, after, last)
			}
		})
	}
}

func TestHasSeen(t *testing.T) {
	c, _ := newTestCache()
	c.UpsertNode(st.Node("n1").Obj(), 5)
	c.UpsertAlloc("n1", alloc("n1", nil), 3)
	for trig, want := range map[string]bool{"n5": true, "n6": false, "a3": true, "a4": false, "p3": true, "p4": false, "s5-3": true, "": true} {
		if got := c.HasSeen(trig); got != want {
			t.Errorf("HasSeen(%q) = %v, want %v", trig, got, want)
		}
	}
}

// Pods on a node come from the alloc record and the assumptions alike, with their labels and pod
// (anti-)affinity; an assumed pod's PlacedPod is reused once committed; snapshots taken earlier keep
// their lists.
func TestNodePods(t *testing.T) {
	c, _ := newTestCache()
	c.UpsertNode(st.Node("n1").Capacity("4", "8Gi", 110).Ready().Obj(), 1)
	c.UpsertNode(st.Node("n2").Capacity("4", "8Gi", 110).Ready().Image(100<<20, "nginx:1").Obj(), 2)
	a := alloc("n1", map[string]*pb.Resources{"x": {Pods: 1}})
	a.Pods["x"].Labels = map[string]string{"app": "db"}
	a.Pods["x"].PodAntiAffinity = &pb.PodAffinity{Required: []*pb.PodAffinityTerm{st.AffinityTerm("zone", st.Selector([]string{"app", "db"}))}}
	c.UpsertAlloc("n1", a, 1)
	web := st.Pod("w", "uw").Labels("app", "web").PreferredPodAffinity(1, st.AffinityTerm("zone", st.Selector([]string{"app", "db"}))).Info()
	if err := c.Assume(web, "n2", 7); err != nil {
		t.Fatal(err)
	}
	before, _ := c.Snapshot()
	podNames := func(pods []*framework.PlacedPod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Name)
		}
		return out
	}
	check := func(s *framework.Snapshot, want map[string][]string, wantAff, wantAnti []string) {
		t.Helper()
		got := map[string][]string{}
		for _, n := range s.Nodes() {
			got[n.Name()] = podNames(n.Pods)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pods (-want +got):\n%s", diff)
		}
		var aff, anti []string
		for _, n := range s.HavePodsWithAffinity() {
			aff = append(aff, n.Name())
		}
		for _, n := range s.HavePodsWithRequiredAntiAffinity() {
			anti = append(anti, n.Name())
		}
		if diff := cmp.Diff([][]string{wantAff, wantAnti}, [][]string{aff, anti}); diff != "" {
			t.Errorf("affinity lists (-want +got):\n%s", diff)
		}
	}
	check(before, map[string][]string{"n1": {"x"}, "n2": {"w"}}, []string{"n1", "n2"}, []string{"n1"})
	if before.ImageNumNodes("nginx:1") != 1 {
		t.Errorf("image count = %d", before.ImageNumNodes("nginx:1"))
	}
	assumed := before.Get("n2").Pods[0]

	// The binder commits w on n2 and x leaves n1.
	a2 := alloc("n2", map[string]*pb.Resources{"uw": {Pods: 1}})
	c.UpsertAlloc("n2", a2, 2)
	c.UpsertAlloc("n1", alloc("n1", nil), 3)
	after, _ := c.Snapshot()
	check(after, map[string][]string{"n1": nil, "n2": {"w"}}, []string{"n2"}, nil)
	// The record only confirms the assumption: the PlacedPod is the assumed one, confirmed in place.
	if got := after.Get("n2").Pods[0]; got != assumed || got.Assumed() {
		t.Error("the committed pod's PlacedPod was rebuilt instead of reusing the assumed one, or is still marked assumed")
	}
	check(before, map[string][]string{"n1": {"x"}, "n2": {"w"}}, []string{"n1", "n2"}, []string{"n1"})
	c.RemoveNode("n2", 4)
	if s, _ := c.Snapshot(); s.ImageNumNodes("nginx:1") != 0 || before.ImageNumNodes("nginx:1") != 1 {
		t.Error("image counts not copy-on-write")
	}
}

// Preemption reads preempted_by and the nominations from the alloc record: a victim marked later is
// seen marked (its PlacedPod is renewed, its compiled terms kept), and nominations are listed apart
// from the pods, in uid order; a dropped nomination requeues like a lost pod.
func TestPreemptionFields(t *testing.T) {
	c, _ := newTestCache()
	c.UpsertNode(st.Node("n1").Capacity("4", "8Gi", 110).Ready().Obj(), 1)
	a := alloc("n1", map[string]*pb.Resources{"v": {MilliCpu: 1000, Pods: 1}})
	c.UpsertAlloc("n1", a, 1)
	s1, _ := c.Snapshot()
	first := s1.Get("n1").Pods[0]

	marked := alloc("n1", map[string]*pb.Resources{"v": {MilliCpu: 1000, Pods: 1}})
	marked.Pods["v"].PreemptedBy = "hi"
	marked.Nominated = map[string]*pb.PodAllocation{
		"hi": {Name: "hi", Priority: 10, Requests: &pb.Resources{MilliCpu: 2000, Pods: 1}},
		"hh": {Name: "hh", Priority: 20, Requests: &pb.Resources{MilliCpu: 500, Pods: 1}},
	}
	if tr := c.UpsertAlloc("n1", marked, 2); tr != "" {
		t.Errorf("marking a victim and nominating triggered %q", tr)
	}
	s2, _ := c.Snapshot()
	n := s2.Get("n1")
	if got := n.Pods[0]; got.PreemptedBy != "hi" || got.Affinity != first.Affinity || first.PreemptedBy != "" {
		t.Errorf("victim %+v (before: %+v)", got, first)
	}
	var nom []string
	for _, p := range n.Nominated {
		nom = append(nom, p.UID)
	}
	if diff := cmp.Diff([]string{"hh", "hi"}, nom); diff != "" {
		t.Errorf("nominated (-want +got):\n%s", diff)
	}
	if n.Requested.MilliCPU != 1000 {
		t.Errorf("nominations counted in Requested: %v", n.Requested)
	}

	dropped := alloc("n1", map[string]*pb.Resources{"v": {MilliCpu: 1000, Pods: 1}})
	dropped.Pods["v"].PreemptedBy = "hi"
	dropped.Nominated = map[string]*pb.PodAllocation{"hi": marked.Nominated["hi"]}
	if tr := c.UpsertAlloc("n1", dropped, 3); tr == "" || IsPodAdded(tr) {
		t.Errorf("a dropped nomination gave trigger %q, want a resources-freed one", tr)
	}
}

// The snapshots' topology domains follow node additions, removals and relabels, and the registry of
// placed pods' anti-affinity terms follows the alloc records; an older snapshot keeps what it saw.
func TestTopologyAndAffinityRegistry(t *testing.T) {
	c, _ := newTestCache()
	c.UpsertNode(st.Node("n1").Label("zone", "z1").Obj(), 1)
	c.UpsertNode(st.Node("n2").Label("zone", "z1").Obj(), 2)
	c.UpsertNode(st.Node("n3").Label("zone", "z2").Obj(), 3)
	domain := func(s *framework.Snapshot, zone string) []string {
		var out []string
		for _, i := range s.Domains("zone")[zone] {
			out = append(out, s.NodeAt(int(i)).Name())
		}
		return out
	}
	s1, _ := c.Snapshot()
	if diff := cmp.Diff([][]string{{"n1", "n2"}, {"n3"}}, [][]string{domain(s1, "z1"), domain(s1, "z2")}); diff != "" {
		t.Errorf("domains (-want +got):\n%s", diff)
	}
	if terms := s1.RequiredAntiAffinityTerms(); len(terms) != 0 || s1.HasScoringAffinity() {
		t.Errorf("empty cluster: terms %d scoring %v", len(terms), s1.HasScoringAffinity())
	}

	// A pod change keeps the index; a relabel and a new node replace it.
	a := alloc("n3", map[string]*pb.Resources{"x": {Pods: 1}, "y": {Pods: 1}})
	for _, uid := range []string{"x", "y"} {
		a.Pods[uid].PodAntiAffinity = &pb.PodAffinity{Required: []*pb.PodAffinityTerm{st.AffinityTerm("zone", st.Selector([]string{"app", "db"}))}}
	}
	a.Pods["y"].PodAffinity = &pb.PodAffinity{Required: []*pb.PodAffinityTerm{st.AffinityTerm("zone", st.Selector([]string{"app", "web"}))}}
	c.UpsertAlloc("n3", a, 1)
	s2, _ := c.Snapshot()
	if s2.Topology() != s1.Topology() {
		t.Error("an alloc change replaced the topology index")
	}
	if terms := s2.RequiredAntiAffinityTerms(); len(terms) != 1 || !s2.HasScoringAffinity() {
		t.Errorf("two pods, one distinct term: terms %d scoring %v", len(terms), s2.HasScoringAffinity())
	}
	c.UpsertNode(st.Node("n2").Label("zone", "z2").Obj(), 4)
	c.UpsertNode(st.Node("n0").Label("zone", "z2").Obj(), 5)
	s3, _ := c.Snapshot()
	if diff := cmp.Diff([][]string{{"n1"}, {"n0", "n2", "n3"}}, [][]string{domain(s3, "z1"), domain(s3, "z2")}); diff != "" {
		t.Errorf("domains after relabel and add (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"n1", "n2"}, domain(s1, "z1")); diff != "" {
		t.Errorf("old snapshot's domain changed (-want +got):\n%s", diff)
	}
	c.UpsertAlloc("n3", alloc("n3", nil), 2)
	c.RemoveNode("n1", 6)
	s4, _ := c.Snapshot()
	if terms := s4.RequiredAntiAffinityTerms(); len(terms) != 0 || s4.HasScoringAffinity() || len(domain(s4, "z1")) != 0 {
		t.Errorf("after the pods left and n1 went: terms %d scoring %v z1 %v", len(terms), s4.HasScoringAffinity(), domain(s4, "z1"))
	}
	if terms := s2.RequiredAntiAffinityTerms(); len(terms) != 1 {
		t.Error("old snapshot's terms changed")
	}
}

// A record that only commits this replica's assumptions on a node leaves the node's NodeInfo (and the
// snapshot) as they are and confirms the assumed pods; any other record rebuilds the node. Either way the
// node counts what a cache fed the record and the remaining assumptions from scratch counts.
func TestConfirmOnly(t *testing.T) {
	pod := func(name, cpu string) *framework.PodInfo { return st.Pod(name, "u"+name).Req(cpu, "1Gi").Info() }
	res := func(p *framework.PodInfo) *pb.Resources { return p.Requests }
	a, b, other := pod("a", "500m"), pod("b", "250m"), pod("o", "1")
	tests := []struct {
		name     string
		record   func() *pb.NodeAllocation // the record after old (which lists "old") and the assumptions a and b
		wantKept bool
	}{
		{"commits one assumption", func() *pb.NodeAllocation {
			return alloc("n", map[string]*pb.Resources{"old": {MilliCpu: 100, Pods: 1}, "ua": res(a)})
		}, true},
		{"commits both", func() *pb.NodeAllocation {
			return alloc("n", map[string]*pb.Resources{"old": {MilliCpu: 100, Pods: 1}, "ua": res(a), "ub": res(b)})
		}, true},
		{"another replica's pod too", func() *pb.NodeAllocation {
			return alloc("n", map[string]*pb.Resources{"old": {MilliCpu: 100, Pods: 1}, "ua": res(a), "uo": res(other)})
		}, false},
		{"other requests than assumed", func() *pb.NodeAllocation {
			return alloc("n", map[string]*pb.Resources{"old": {MilliCpu: 100, Pods: 1}, "ua": {MilliCpu: 900, Pods: 1}})
		}, false},
		{"an old pod lost", func() *pb.NodeAllocation { return alloc("n", map[string]*pb.Resources{"ua": res(a)}) }, false},
		{"an old pod marked a victim", func() *pb.NodeAllocation {
			r := alloc("n", map[string]*pb.Resources{"old": {MilliCpu: 100, Pods: 1}, "ua": res(a)})
			r.Pods["old"].PreemptedBy = "uz"
			return r
		}, false},
		{"a nomination", func() *pb.NodeAllocation {
			r := alloc("n", map[string]*pb.Resources{"old": {MilliCpu: 100, Pods: 1}, "ua": res(a)})
			r.Nominated = map[string]*pb.PodAllocation{"uz": {Name: "z", Namespace: "default", Requests: &pb.Resources{MilliCpu: 100}}}
			return r
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestCache()
			c.UpsertNode(st.Node("n").Capacity("8", "16Gi", 110).Ready().Obj(), 1)
			c.UpsertAlloc("n", alloc("n", map[string]*pb.Resources{"old": {MilliCpu: 100, Pods: 1}}), 1)
			for i, p := range []*framework.PodInfo{a, b} {
				if err := c.Assume(p, "n", uint64(i+1)); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := c.Snapshot()
			placedA := before.Get("n").Pods[1]
			rec := tt.record()
			if trig := c.UpsertAlloc("n", rec, 2); trig == "" {
				t.Error("no trigger for a record that gained pods")
			}
			after, _ := c.Snapshot()
			if kept := after == before; kept != tt.wantKept {
				t.Errorf("snapshot kept: %v, want %v", kept, tt.wantKept)
			}
			if tt.wantKept && placedA.Assumed() {
				t.Error("the committed assumption is still marked assumed in the kept NodeInfo")
			}
			// The oracle: a fresh cache with the record and the assumptions it does not list.
			fresh, _ := newTestCache()
			fresh.UpsertNode(st.Node("n").Capacity("8", "16Gi", 110).Ready().Obj(), 1)
			fresh.UpsertAlloc("n", rec, 2)
			for i, p := range []*framework.PodInfo{a, b} {
				if _, ok := rec.Pods[p.UID()]; !ok {
					if err := fresh.Assume(p, "n", uint64(i+1)); err != nil {
						t.Fatal(err)
					}
				}
			}
			want, _ := fresh.Snapshot()
			got, w := after.Get("n"), want.Get("n")
			if diff := cmp.Diff(w.Requested.Proto(), got.Requested.Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("requested (-want +got):\n%s", diff)
			}
			if got.NonZeroMilliCPU != w.NonZeroMilliCPU || got.NonZeroMemory != w.NonZeroMemory {
				t.Errorf("non-zero requests %d/%d, want %d/%d", got.NonZeroMilliCPU, got.NonZeroMemory, w.NonZeroMilliCPU, w.NonZeroMemory)
			}
			uids := func(n *framework.NodeInfo) map[string]bool {
				m := map[string]bool{}
				for _, p := range n.Pods {
					m[p.UID] = p.Assumed()
				}
				return m
			}
			if diff := cmp.Diff(uids(w), uids(got)); diff != "" {
				t.Errorf("pods, uid -> assumed (-want +got):\n%s", diff)
			}
			if n := c.NumAssumed(); n != fresh.NumAssumed() {
				t.Errorf("%d assumptions left, want %d", n, fresh.NumAssumed())
			}
		})
	}
}

// Applying a node's alloc keys one change at a time gives the node the same NodeInfo as applying the
// record they fold into: requests, pods (with the victims' marks) and nominations; and the same triggers.
func TestApplyPodAllocMatchesTheWholeRecord(t *testing.T) {
	r := func(cpu int64) *pb.Resources { return &pb.Resources{MilliCpu: cpu, Memory: cpu << 20, Pods: 1} }
	type step struct {
		uid      string
		cpu      int64 // 0: the pod's key is deleted
		meta     *pb.NodeAllocation
		wantTrig byte // 0: none
	}
	steps := []step{
		{uid: "u1", cpu: 500, wantTrig: 'p'},
		{uid: "u2", cpu: 250, wantTrig: 'p'},
		{uid: "u3", cpu: 100, wantTrig: 'p'},
		// Rewritten in place with other requests: its deletion below frees what it counts now.
		{uid: "u3", cpu: 150},
		{meta: &pb.NodeAllocation{Nominated: map[string]*pb.PodAllocation{"hi": {Name: "hi", Requests: r(300)}},
			Pods: map[string]*pb.PodAllocation{"u2": {PreemptedBy: "hi"}}}},
		{uid: "u2", cpu: 0, wantTrig: 'a'},
		{meta: &pb.NodeAllocation{}, wantTrig: 'a'},
		{uid: "u1", cpu: 0, wantTrig: 'a'},
		{uid: "u3", cpu: 0, wantTrig: 'a'},
	}
	inc, _ := newTestCache()
	whole, _ := newTestCache()
	for _, c := range []*Cache{inc, whole} {
		c.UpsertNode(st.Node("n").Capacity("4", "8Gi", 110).Obj(), 1)
	}
	pods := map[string]*pb.PodAllocation{}
	var meta *pb.NodeAllocation
	for i, s := range steps {
		rev := uint64(10 + i)
		var ch Change
		switch {
		case s.meta != nil:
			meta = s.meta
			ch = inc.ApplyNodeMeta("n", s.meta, rev)
		case s.cpu == 0:
			delete(pods, s.uid)
			ch = inc.ApplyPodAlloc("n", s.uid, nil, rev)
		default:
			pods[s.uid] = &pb.PodAllocation{Name: s.uid, Namespace: "default", Requests: r(s.cpu)}
			ch = inc.ApplyPodAlloc("n", s.uid, pods[s.uid], rev)
		}
		if got := byte(0); ch.Trigger != "" {
			got = ch.Trigger[0]
			if got != s.wantTrig {
				t.Errorf("step %d: trigger %q, want kind %q", i, ch.Trigger, s.wantTrig)
			}
		} else if s.wantTrig != 0 {
			t.Errorf("step %d: no trigger, want kind %q", i, s.wantTrig)
		}
		rec := &pb.NodeAllocation{Node: "n", Pods: map[string]*pb.PodAllocation{}, Total: &pb.Resources{}, Nominated: meta.GetNominated()}
		for uid, p := range pods {
			if by := meta.GetPods()[uid].GetPreemptedBy(); by != "" {
				p = &pb.PodAllocation{Name: p.Name, Namespace: p.Namespace, Requests: p.Requests, PreemptedBy: by}
			}
			rec.Pods[uid] = p
			rec.Total.MilliCpu += p.Requests.MilliCpu
			rec.Total.Memory += p.Requests.Memory
			rec.Total.Pods += p.Requests.Pods
		}
		whole.UpsertAlloc("n", rec, rev)
		si, _ := inc.Snapshot()
		sw, _ := whole.Snapshot()
		a, b := si.Get("n"), sw.Get("n")
		if diff := cmp.Diff(b.Requested, a.Requested); diff != "" {
			t.Errorf("step %d: requested (-whole +incremental):\n%s", i, diff)
		}
		type placed struct {
			UID, PreemptedBy string
		}
		list := func(ni *framework.NodeInfo, nominated bool) []placed {
			var out []placed
			src := ni.Pods
			if nominated {
				src = ni.Nominated
			}
			for _, p := range src {
				out = append(out, placed{p.UID, p.PreemptedBy})
			}
			return out
		}
		if diff := cmp.Diff(list(b, false), list(a, false)); diff != "" {
			t.Errorf("step %d: pods (-whole +incremental):\n%s", i, diff)
		}
		if diff := cmp.Diff(list(b, true), list(a, true)); diff != "" {
			t.Errorf("step %d: nominated (-whole +incremental):\n%s", i, diff)
		}
	}
}
