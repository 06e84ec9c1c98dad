package podtopologyspread

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const zone = "topology.kubernetes.io/zone"

func node(name, z string) *st.NodeWrapper {
	w := st.Node(name).Label(LabelHostname, name)
	if z != "" {
		w.Label(zone, z)
	}
	return w
}

func foo(uid string) *st.PodWrapper { return st.Pod(uid, uid).Labels("foo", "bar") }

func spread(key string, maxSkew int32, when string) *pb.TopologySpreadConstraint {
	return &pb.TopologySpreadConstraint{MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: when,
		LabelSelector: st.Selector([]string{"foo", "bar"})}
}

func withMinDomains(c *pb.TopologySpreadConstraint, n int32) *pb.TopologySpreadConstraint {
	c.MinDomains = &n
	return c
}

func snapshot(nodes []*st.NodeWrapper, existing map[string][]*st.PodWrapper) *framework.Snapshot {
	var infos []*framework.NodeInfo
	for _, n := range nodes {
		var pods []*framework.PlacedPod
		for _, p := range existing[n.Obj().Metadata.Name] {
			pods = append(pods, p.Placed())
		}
		infos = append(infos, n.Info().WithPods(pods...))
	}
	return framework.SnapshotOf(infos...)
}

// The docs' cluster: zone A with node1, node2, zone B with node3, node4; pods labelled foo=bar on
// node1, node2 and node3 (https://kubernetes.io/docs/concepts/scheduling-eviction/topology-spread-constraints/).
var (
	docNodes    = []*st.NodeWrapper{node("node1", "A"), node("node2", "A"), node("node3", "B"), node("node4", "B")}
	docExisting = map[string][]*st.PodWrapper{"node1": {foo("a")}, "node2": {foo("b")}, "node3": {foo("c")}}
)

func TestFilter(t *testing.T) {
	const no, missing = ErrReasonConstraintsNotMatch, ErrReasonNodeLabelNotMatch
	tests := []struct {
		name     string
		pod      *st.PodWrapper
		nodes    []*st.NodeWrapper
		existing map[string][]*st.PodWrapper
		want     map[string]string
	}{
		{"no constraints: skipped", foo("p"), docNodes, docExisting,
			map[string]string{"node1": "", "node2": "", "node3": "", "node4": ""}},
		{"one constraint: zone B only (skew 2-1 would become 3-1)", foo("p").Spread(spread(zone, 1, DoNotSchedule)), docNodes, docExisting,
			map[string]string{"node1": no, "node2": no, "node3": "", "node4": ""}},
		{"maxSkew 2 allows zone A", foo("p").Spread(spread(zone, 2, DoNotSchedule)), docNodes, docExisting,
			map[string]string{"node1": "", "node2": "", "node3": "", "node4": ""}},
		{"two constraints: zone B and the empty host", foo("p").Spread(spread(zone, 1, DoNotSchedule)).Spread(spread(LabelHostname, 1, DoNotSchedule)),
			docNodes, docExisting, map[string]string{"node1": no, "node2": no, "node3": no, "node4": ""}},
		// skew in zone A = 2 + 0 (no self-match) − 1 = 1 ≤ maxSkew.
		{"a pod that does not match its own selector adds nothing", st.Pod("p", "u").Spread(spread(zone, 1, DoNotSchedule)), docNodes, docExisting,
			map[string]string{"node1": "", "node2": "", "node3": "", "node4": ""}},
		{"pods of other namespaces do not count", foo("p").Spread(spread(zone, 1, DoNotSchedule)), docNodes,
			map[string][]*st.PodWrapper{"node1": {foo("a").Namespace("other")}, "node2": {foo("b").Namespace("other")}, "node3": {foo("c")}},
			map[string]string{"node1": "", "node2": "", "node3": no, "node4": no}},
		{"a node without the topology key is unresolvable", foo("p").Spread(spread(zone, 1, DoNotSchedule)),
			append([]*st.NodeWrapper{node("node5", "")}, docNodes...), docExisting,
			map[string]string{"node1": no, "node2": no, "node3": "", "node4": "", "node5": missing}},
		{"ScheduleAnyway does not filter", foo("p").Spread(spread(zone, 1, ScheduleAnyway)), docNodes, docExisting,
			map[string]string{"node1": "", "node2": "", "node3": "", "node4": ""}},
		// minDomains 3 with two zones: the global minimum counts as 0, so skew = count + 1.
		{"minDomains above the domains found", foo("p").Spread(withMinDomains(spread(zone, 2, DoNotSchedule), 3)), docNodes, docExisting,
			map[string]string{"node1": no, "node2": no, "node3": "", "node4": ""}},
		{"minDomains met", foo("p").Spread(withMinDomains(spread(zone, 2, DoNotSchedule), 2)), docNodes, docExisting,
			map[string]string{"node1": "", "node2": "", "node3": "", "node4": ""}},
		// nodeAffinityPolicy Honor (default): zone B is excluded by the nodeSelector, so A's minimum is
		// its own count and A fits; with Ignore, B's 1 is the minimum again.
		{"nodeAffinityPolicy Honor excludes non-matching nodes' domains", foo("p").NodeSelector(zone, "A").Spread(spread(zone, 1, DoNotSchedule)),
			docNodes, map[string][]*st.PodWrapper{"node1": {foo("a")}, "node2": {foo("b")}},
			map[string]string{"node1": "", "node2": "", "node3": "", "node4": ""}},
		{"nodeAffinityPolicy Ignore", foo("p").NodeSelector(zone, "A").Spread(func() *pb.TopologySpreadConstraint {
			c := spread(zone, 1, DoNotSchedule)
			c.NodeAffinityPolicy = PolicyIgnore
			return c
		}()), docNodes, map[string][]*st.PodWrapper{"node1": {foo("a")}, "node2": {foo("b")}},
			map[string]string{"node1": no, "node2": no, "node3": "", "node4": ""}},
		// nodeTaintsPolicy Ignore (default) counts zone B's tainted nodes; Honor drops zone B entirely.
		{"nodeTaintsPolicy Ignore counts tainted nodes", foo("p").Spread(spread(zone, 1, DoNotSchedule)),
			[]*st.NodeWrapper{node("node1", "A"), node("node3", "B").Taint("k", "v", "NoSchedule")},
			map[string][]*st.PodWrapper{"node1": {foo("a")}}, map[string]string{"node1": no, "node3": ""}},
		{"nodeTaintsPolicy Honor", foo("p").Spread(func() *pb.TopologySpreadConstraint {
			c := spread(zone, 1, DoNotSchedule)
			c.NodeTaintsPolicy = PolicyHonor
			return c
		}()), []*st.NodeWrapper{node("node1", "A"), node("node3", "B").Taint("k", "v", "NoSchedule")},
			map[string][]*st.PodWrapper{"node1": {foo("a")}}, map[string]string{"node1": "", "node3": ""}},
		{"matchLabelKeys narrows the selector to the pod's own value", foo("p").Labels("rev", "2").Spread(func() *pb.TopologySpreadConstraint {
			c := spread(zone, 1, DoNotSchedule)
			c.MatchLabelKeys = []string{"rev"}
			return c
		}()), docNodes, map[string][]*st.PodWrapper{"node1": {foo("a").Labels("rev", "2")}, "node3": {foo("c").Labels("rev", "1"), foo("d").Labels("rev", "1")}},
			map[string]string{"node1": no, "node2": no, "node3": "", "node4": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			state := framework.NewCycleState()
			snap := snapshot(tt.nodes, tt.existing)
			state.SetSnapshot(snap)
			pod := tt.pod.Info()
			pre := p.PreFilter(state, pod)
			got := map[string]string{}
			for _, n := range snap.Nodes() {
				reason := ""
				if pre.Code() != framework.Skip {
					reason = p.Filter(state, pod, n).Message()
				}
				got[n.Name()] = reason
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestScore(t *testing.T) {
	tests := []struct {
		name     string
		pod      *st.PodWrapper
		nodes    []*st.NodeWrapper
		existing map[string][]*st.PodWrapper
		want     map[string]int64 // nil: skipped
	}{
		{"DoNotSchedule does not score", foo("p").Spread(spread(zone, 1, DoNotSchedule)), docNodes, docExisting, nil},
		// raw = count × ln(2 zones + 2) + maxSkew − 1: A 2×1.386 → 3, B 1×1.386 → 1;
		// normalised 100 × (max + min − raw) / max: A 100×1/3 = 33, B 100.
		{"fewer matching pods in the zone score higher", foo("p").Spread(spread(zone, 1, ScheduleAnyway)), docNodes, docExisting,
			map[string]int64{"node1": 33, "node2": 33, "node3": 100, "node4": 100}},
		// hostname: counted on the node itself; 4 nodes -> ln 6 = 1.79: node1..3 → 2, node4 → 0.
		{"per host", foo("p").Spread(spread(LabelHostname, 1, ScheduleAnyway)), docNodes, docExisting,
			map[string]int64{"node1": 0, "node2": 0, "node3": 0, "node4": 100}},
		{"a node lacking the key scores 0", foo("p").Spread(spread(zone, 1, ScheduleAnyway)),
			append([]*st.NodeWrapper{node("node5", "")}, docNodes...), docExisting,
			map[string]int64{"node1": 33, "node2": 33, "node3": 100, "node4": 100, "node5": 0}},
		{"no matching pods: every node 100", foo("p").Spread(spread(zone, 3, ScheduleAnyway)), docNodes, nil,
			map[string]int64{"node1": 100, "node2": 100, "node3": 100, "node4": 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			state := framework.NewCycleState()
			snap := snapshot(tt.nodes, tt.existing)
			state.SetSnapshot(snap)
			pod := tt.pod.Info()
			pre := p.PreScore(state, pod, snap.Nodes())
			if pre.Code() == framework.Skip {
				if tt.want != nil {
					t.Fatal("PreScore skipped")
				}
				return
			}
			if tt.want == nil {
				t.Fatal("PreScore did not skip")
			}
			scores := make([]framework.NodeScore, 0, len(snap.Nodes()))
			for _, n := range snap.Nodes() {
				s, st := p.Score(state, pod, n)
				if !st.IsSuccess() {
					t.Fatal(st.Message())
				}
				scores = append(scores, framework.NodeScore{Node: n, Score: s})
			}
			if st := p.NormalizeScore(state, pod, scores); !st.IsSuccess() {
				t.Fatal(st.Message())
			}
			got := map[string]int64{}
			for _, s := range scores {
				got[s.Node.Name()] = s.Score
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// One plugin kept across snapshots that share chunks (as the cache hands them out) decides as a fresh
// plugin does on each: the running totals follow every change to a node, and are not shared between pods
// whose counts differ (another namespace or selector, or a node affinity that excludes nodes).
func TestChunkMemoFollowsChanges(t *testing.T) {
	var b framework.NodeListBuilder
	pods := map[string][]*framework.PlacedPod{}
	infos := map[string]*framework.NodeInfo{}
	var names []string
	for i := range 100 { // several chunks
		name := fmt.Sprintf("n%03d", i)
		names = append(names, name)
		infos[name] = node(name, fmt.Sprintf("z%d", i%4)).Info()
		b.Set(name, infos[name])
	}
	kept := New()
	candidates := []*st.PodWrapper{
		foo("p").Spread(spread(zone, 1, DoNotSchedule)),
		foo("q").Namespace("other").Spread(spread(zone, 1, DoNotSchedule)),
		foo("r").Spread(spread(zone, 1, DoNotSchedule)).NodeSelector(zone, "z1"),
		st.Pod("s", "s").Labels("app", "x").Spread(&pb.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: zone,
			WhenUnsatisfiable: DoNotSchedule, LabelSelector: st.Selector([]string{"app", "x"})}),
	}
	decide := func(p *PodTopologySpread, snap *framework.Snapshot, pod *framework.PodInfo) map[string]string {
		state := framework.NewCycleState()
		state.SetSnapshot(snap)
		got := map[string]string{}
		if st := p.PreFilter(state, pod); st.Code() == framework.Skip {
			return got
		}
		for _, n := range snap.Nodes() {
			got[n.Name()] = p.Filter(state, pod, n).Message()
		}
		return got
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 200 {
		// Place a pod of some kind on a random node, or take one away.
		name := names[rng.IntN(len(names))]
		switch c := candidates[rng.IntN(len(candidates))]; {
		case rng.IntN(4) == 0 && len(pods[name]) > 0:
			pods[name] = slices.Clone(pods[name][1:])
		default:
			w := *c
			pods[name] = append(slices.Clone(pods[name]), w.Placed())
		}
		b.Set(name, infos[name].WithPods(pods[name]...))
		if step%3 == 0 {
			// Relabel one of a few nodes: into zone z5, which only they have, out of it, or out of any
			// zone, so that a domain comes and goes while the number of chunks stays.
			r := names[rng.IntN(3)*37]
			infos[r] = node(r, []string{"z0", "z5", ""}[rng.IntN(3)]).Info()
			b.Set(r, infos[r].WithPods(pods[r]...))
		}
		snap := framework.NewSnapshotFromParts(framework.SnapshotParts{Nodes: b.List()})
		for _, c := range candidates {
			pod := c.Info()
			if diff := cmp.Diff(decide(New(), snap, pod), decide(kept, snap, pod)); diff != "" {
				t.Fatalf("step %d, pod %s: kept plugin differs from a fresh one (-fresh +kept):\n%s", step, pod.Pod.GetMetadata().GetName(), diff)
			}
		}
	}
}
