package core

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins"
	st "github.com/podbus/podbus/sched/schedtest"
)

func testAlgorithm(t testing.TB) *Algorithm {
	t.Helper()
	fw, err := framework.New(plugins.DefaultPlugins()...)
	if err != nil {
		t.Fatal(err)
	}
	return NewAlgorithm(fw, 0)
}

// equalNodes returns n identical, empty, ready nodes.
func equalNodes(n int) []*framework.NodeInfo {
	out := make([]*framework.NodeInfo, n)
	for i := range out {
		out[i] = st.Node(fmt.Sprintf("node-%03d", i)).Capacity("4", "8Gi", 110).Ready().Info()
	}
	return out
}

func TestScheduleIsDeterministic(t *testing.T) {
	a := testAlgorithm(t)
	snap := framework.SnapshotOf(equalNodes(20)...)
	chosen := map[string]bool{}
	for i := 0; i < 50; i++ {
		uid := fmt.Sprintf("uid-%d", i)
		pod := st.Pod("p", uid).Req("100m", "64Mi").Info()
		first, err := a.Schedule(snap, pod)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 3; j++ {
			// A fresh algorithm and a rebuilt snapshot in another order: same answer.
			again, err := testAlgorithm(t).Schedule(framework.SnapshotOf(reversed(snap.Nodes())...), pod)
			if err != nil {
				t.Fatal(err)
			}
			if again != first {
				t.Fatalf("uid %s: %+v then %+v", uid, first, again)
			}
		}
		chosen[first.Node] = true
	}
	// Ties are broken by the uid: 50 pods over 20 equal nodes must not all land on a few.
	if len(chosen) < 10 {
		t.Errorf("50 pods spread over only %d of 20 equal nodes", len(chosen))
	}
}

func reversed(in []*framework.NodeInfo) []*framework.NodeInfo {
	out := make([]*framework.NodeInfo, len(in))
	for i, n := range in {
		out[len(in)-1-i] = n
	}
	return out
}

func TestSchedule(t *testing.T) {
	big := st.Node("big").Capacity("16", "64Gi", 110).Ready()
	small := st.Node("small").Capacity("2", "4Gi", 110).Ready()
	tests := []struct {
		name      string
		pod       *st.PodWrapper
		nodes     []*framework.NodeInfo
		want      string
		wantScore int64
		wantErr   string
		reasons   map[string]int32
	}{
		{"least allocated wins", st.Pod("p", "u").Req("1", "1Gi"), []*framework.NodeInfo{big.Info(), small.Info()}, "big", 0, "", nil},
		{"busy node loses", st.Pod("p", "u").Req("1", "1Gi"), []*framework.NodeInfo{
			st.Node("a").Capacity("4", "8Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 3000, Memory: 4 << 30, Pods: 3}),
			st.Node("b").Capacity("4", "8Gi", 110).Ready().Info(),
		}, "b", 0, "", nil},
		{"preferred affinity beats resources", st.Pod("p", "u").Req("1", "1Gi").PreferredTerm(10, st.Term(st.Expr("zone", "In", "z1"))),
			[]*framework.NodeInfo{big.Info(), st.Node("small").Capacity("2", "4Gi", 110).Label("zone", "z1").Ready().Info()}, "small", 0, "", nil},
		{"PreferNoSchedule avoided", st.Pod("p", "u"), []*framework.NodeInfo{
			st.Node("a").Capacity("4", "8Gi", 110).Ready().Taint("k", "v", "PreferNoSchedule").Info(),
			st.Node("b").Capacity("2", "4Gi", 110).Ready().Info(),
		}, "b", 0, "", nil},
		{"nodeName", st.Pod("p", "u").NodeName("small"), []*framework.NodeInfo{big.Info(), small.Info()}, "small", 0, "", nil},
		// total = 3*100 (taints) + 2*0 (affinity) + 1*leastAllocated(cpu 93, memory 98 -> 95)
		// + 1*balancedAllocation(with the pod, fractions 1/16 and 1/64: (1 - 0.0234) * 100 -> 97; without,
		// 0 and 0 -> 100; 50 + (50 + 97 - 100) / 2 = 73); spread, inter-pod affinity and image locality
		// skip (no constraints, no pods, no images).
		{"score is the weighted sum", st.Pod("p", "u").Req("1", "1Gi"), []*framework.NodeInfo{big.Info()}, "big", 300 + 95 + 73, "", nil},
		{"no nodes", st.Pod("p", "u"), nil, "", 0, "no nodes available to schedule pods", nil},
		{"one reason per node", st.Pod("p", "u").Req("3", "1Gi").NodeSelector("zone", "z1"), []*framework.NodeInfo{
			big.Info(),
			st.Node("s1").Capacity("2", "4Gi", 110).Label("zone", "z1").Ready().Info(),
			st.Node("s2").Capacity("2", "4Gi", 110).Label("zone", "z1").Ready().Info(),
			st.Node("down").Capacity("2", "4Gi", 110).Label("zone", "z1").Info(),
			st.Node("tainted").Capacity("8", "4Gi", 110).Label("zone", "z1").Ready().Taint("dedicated", "db", "NoSchedule").Info(),
			st.Node("cordoned").Capacity("8", "4Gi", 110).Label("zone", "z1").Ready().Unschedulable().Info(),
		}, "", 0, "0/6 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s), " +
			"1 node(s) were not ready, 1 node(s) were unschedulable, 2 Insufficient cpu. " +
			"preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling.",
			map[string]int32{
				"node(s) didn't match Pod's node affinity/selector": 1, "node(s) had untolerated taint(s)": 1,
				"node(s) were not ready": 1, "node(s) were unschedulable": 1, "Insufficient cpu": 2,
			}},
		// kube-scheduler v1.37's text for a mixed cluster: a full node preemption could help (but finds
		// no lower-priority pods on), two tainted nodes it cannot (the one with two untolerated taints
		// counts once), and a node smaller than the pod's request it cannot either.
		{"mixed cluster", st.Pod("p", "u").Req("3", "1Gi"), []*framework.NodeInfo{
			st.Node("full").Capacity("4", "8Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 2000, Pods: 2}),
			st.Node("t1").Capacity("8", "16Gi", 110).Ready().Taint("dedicated", "db", "NoSchedule").Info(),
			st.Node("t2").Capacity("8", "16Gi", 110).Ready().Taint("a", "1", "NoSchedule").Taint("b", "2", "NoExecute").Info(),
			st.Node("small").Capacity("2", "4Gi", 110).Ready().Info(),
		}, "", 0, "0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had untolerated taint(s). " +
			"preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling.",
			map[string]int32{"Insufficient cpu": 2, "node(s) had untolerated taint(s)": 2}},
		{"mixed cluster, the pod fits every node's size", st.Pod("p", "u").Req("1", "1Gi"), []*framework.NodeInfo{
			st.Node("full").Capacity("4", "8Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 3500, Pods: 3}),
			st.Node("t1").Capacity("8", "16Gi", 110).Ready().Taint("dedicated", "db", "NoSchedule").Info(),
			st.Node("t2").Capacity("8", "16Gi", 110).Ready().Taint("a", "1", "NoSchedule").Taint("b", "2", "NoExecute").Info(),
		}, "", 0, "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint(s). " +
			"preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.",
			map[string]int32{"Insufficient cpu": 1, "node(s) had untolerated taint(s)": 2}},
		// 3 cpu and 5Gi exceed the whole 2-cpu/4Gi node: preemption cannot help.
		{"several resources on one node", st.Pod("p", "u").Req("3", "5Gi"), []*framework.NodeInfo{small.Info()}, "",
			0, "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.", map[string]int32{"Insufficient cpu": 1, "Insufficient memory": 1}},
		{"several resources on a busy node", st.Pod("p", "u").Req("1", "1Gi"), []*framework.NodeInfo{
			st.Node("small").Capacity("2", "4Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 1500, Memory: 3584 << 20, Pods: 2}),
		}, "", 0, "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
			map[string]int32{"Insufficient cpu": 1, "Insufficient memory": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := testAlgorithm(t).Schedule(framework.SnapshotOf(tt.nodes...), tt.pod.Info())
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v\nwant  %s", err, tt.wantErr)
				}
				var fit *framework.FitError
				if errors.As(err, &fit) {
					if diff := cmp.Diff(tt.reasons, fit.Reasons); diff != "" {
						t.Errorf("reasons (-want +got):\n%s", diff)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Node != tt.want {
				t.Errorf("node = %s, want %s", res.Node, tt.want)
			}
			if tt.wantScore != 0 && res.Score != tt.wantScore {
				t.Errorf("score = %d, want %d", res.Score, tt.wantScore)
			}
			if res.Evaluated != len(tt.nodes) {
				t.Errorf("evaluated %d of %d", res.Evaluated, len(tt.nodes))
			}
		})
	}
}

func TestNumFeasibleNodesToFind(t *testing.T) {
	for _, tt := range []struct{ percentage, all, want int }{
		// adaptive: 50% - all/125, at least 5%, at least 100 nodes
		{0, 10, 10}, {0, 99, 99}, {0, 100, 100}, {0, 1000, 420}, {0, 5000, 500}, {0, 6000, 300}, {0, 10000, 500}, {0, 1500, 570},
		// configured
		{100, 5000, 5000}, {10, 5000, 500}, {1, 5000, 100}, {50, 150, 100}, {30, 50, 50}, {150, 500, 500},
	} {
		if got := numFeasibleNodesToFind(tt.percentage, tt.all); got != tt.want {
			t.Errorf("numFeasibleNodesToFind(%d, %d) = %d, want %d", tt.percentage, tt.all, got, tt.want)
		}
	}
}

func TestLargeClusterStopsEarly(t *testing.T) {
	a := testAlgorithm(t)
	snap := framework.SnapshotOf(equalNodes(1000)...)
	res, err := a.Schedule(snap, st.Pod("p", "u").Info())
	if err != nil {
		t.Fatal(err)
	}
	if res.Evaluated != 420 || res.Feasible != 420 {
		t.Errorf("evaluated %d, feasible %d; want 420", res.Evaluated, res.Feasible)
	}
}

func TestScheduleAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	a := testAlgorithm(t)
	snap := framework.SnapshotOf(equalNodes(50)...)
	pod := st.Pod("p", "u").Req("100m", "64Mi").Info()
	_, _ = a.Schedule(snap, pod) // warm the pool
	// The filter and score loops allocate nothing; what remains is per cycle (the nodeaffinity state).
	if n := testing.AllocsPerRun(50, func() { _, _ = a.Schedule(snap, pod) }); n > 4 {
		t.Errorf("%v allocations per cycle over 50 nodes", n)
	}
}

func BenchmarkSchedule(b *testing.B) {
	for _, nodes := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			a := testAlgorithm(b)
			snap := framework.SnapshotOf(equalNodes(nodes)...)
			pod := st.Pod("p", "u").Req("100m", "64Mi").NodeSelector("x", "y").Info()
			pod.Pod.Spec.NodeSelector = nil
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Schedule(snap, pod); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScheduleConstrained is one cycle at 5,000 nodes in 10 zones holding 2 placed pods each, in
// the shapes of the load test's variants: required anti-affinity on the hostname within 10 groups
// (every placed pod carries such a term), and zone spread with maxSkew 1. The snapshot is the same
// every iteration, so the spread plugin's running totals need no recount; in a run a cycle recounts the one
// or two chunks that changed since the previous one.
func BenchmarkScheduleConstrained(b *testing.B) {
	const nodes, zones, groups = 5000, 10, 10
	const labelHostname, labelZone = "kubernetes.io/hostname", "topology.kubernetes.io/zone"
	anti := func(p *st.PodWrapper, g string) *st.PodWrapper {
		return p.Labels("group", g).PodAntiAffinity(st.AffinityTerm(labelHostname, st.Selector([]string{"group", g})))
	}
	spread := func(p *st.PodWrapper) *st.PodWrapper {
		return p.Labels("app", "bench").Spread(&pb.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: labelZone,
			WhenUnsatisfiable: "DoNotSchedule", LabelSelector: st.Selector([]string{"app", "bench"})})
	}
	infos := make([]*framework.NodeInfo, nodes)
	for i := range infos {
		name := fmt.Sprintf("node-%04d", i)
		n := st.Node(name).Capacity("32", "128Gi", 250).Ready().Label(labelHostname, name).
			Label(labelZone, fmt.Sprintf("zone-%d", i%zones))
		var pods []*framework.PlacedPod
		for j := range 2 {
			uid := fmt.Sprintf("%s-%d", name, j)
			pods = append(pods, spread(anti(st.Pod(uid, uid).Req("100m", "64Mi"), fmt.Sprintf("g%d", (i+j)%groups))).Placed())
		}
		infos[i] = n.Info().WithPods(pods...)
	}
	snap := framework.SnapshotOf(infos...)
	// The same cluster with one more spread pod on every node outside zone-0: the pod may then only go to
	// zone-0, a tenth of the nodes, which the filter names as candidates.
	skewed := make([]*framework.NodeInfo, nodes)
	for i, n := range infos {
		skewed[i] = n
		if i%zones != 0 {
			uid := n.Name() + "-x"
			skewed[i] = n.WithPods(append(slices.Clone(n.Pods), spread(st.Pod(uid, uid).Req("100m", "64Mi")).Placed())...)
		}
	}
	for _, tt := range []struct {
		name string
		snap *framework.Snapshot
		pod  *framework.PodInfo
	}{
		{"anti-affinity", snap, anti(st.Pod("p", "u").Req("100m", "64Mi"), "g3").Info()},
		{"spread", snap, spread(st.Pod("p", "u").Req("100m", "64Mi")).Info()},
		{"spread-skewed", framework.SnapshotOf(skewed...), spread(st.Pod("p", "u").Req("100m", "64Mi")).Info()},
	} {
		b.Run(tt.name, func(b *testing.B) {
			snap := tt.snap
			a := testAlgorithm(b)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Schedule(snap, tt.pod); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Filtering only the candidates a plugin names must decide exactly as filtering every node: same node,
// score, feasible and evaluated counts, and the same reasons when the pod fits nowhere.
func TestCandidateNodesDecideAsTheFullScan(t *testing.T) {
	const labelZone = "topology.kubernetes.io/zone"
	rng := rand.New(rand.NewPCG(7, 11))
	narrowed := 0
	for round := range 60 {
		zones := 2 + rng.IntN(8)
		nodes := 20 + rng.IntN(300)
		var infos []*framework.NodeInfo
		for i := range nodes {
			name := fmt.Sprintf("node-%04d", i)
			n := st.Node(name).Capacity("2", "8Gi", 110).Ready().Label("kubernetes.io/hostname", name)
			if rng.IntN(20) > 0 { // a few nodes lack the zone label
				n = n.Label(labelZone, fmt.Sprintf("zone-%d", rng.IntN(zones)))
			}
			if rng.IntN(4) == 0 {
				n = n.Label("disk", "ssd")
			}
			var pods []*framework.PlacedPod
			for j := range rng.IntN(4) {
				uid := fmt.Sprintf("%s-%d", name, j)
				pods = append(pods, st.Pod(uid, uid).Req("500m", "64Mi").Labels("app", fmt.Sprintf("a%d", rng.IntN(2))).Placed())
			}
			infos = append(infos, n.Info().WithPods(pods...))
		}
		snap := framework.SnapshotOf(infos...)
		for k := range 10 {
			uid := fmt.Sprintf("r%d-p%d", round, k)
			p := st.Pod("p", uid).Req(fmt.Sprintf("%dm", 100+rng.IntN(1800)), "64Mi").Labels("app", "a0").
				Spread(&pb.TopologySpreadConstraint{MaxSkew: int32(1 + rng.IntN(2)), TopologyKey: labelZone,
					WhenUnsatisfiable: "DoNotSchedule", LabelSelector: st.Selector([]string{"app", "a0"})})
			if rng.IntN(3) == 0 {
				p = p.NodeSelector("disk", "ssd")
			}
			if rng.IntN(4) == 0 {
				p = p.Spread(&pb.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
					WhenUnsatisfiable: "DoNotSchedule", LabelSelector: st.Selector([]string{"app", "a1"})})
			}
			pod := p.Info()
			fast := testAlgorithm(t)
			full := testAlgorithm(t)
			full.fullScan = true
			got, gotErr := fast.Schedule(snap, pod)
			want, wantErr := full.Schedule(snap, pod)
			if got != want || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("round %d pod %d: candidates decided %+v (%v), the full scan %+v (%v)", round, k, got, gotErr, want, wantErr)
			}
			c := fast.pool.Get().(*Cycle)
			c.state.SetSnapshot(snap)
			clear(c.skip)
			if fast.fw.RunPreFilterPlugins(c.state, pod, c.skip).IsSuccess() {
				if _, ok := fast.fw.RunCandidatePlugins(c.state, pod, c.skip, c.skipOn); ok {
					narrowed++
				}
			}
		}
	}
	if narrowed < 100 {
		t.Errorf("only %d of 600 cycles were narrowed down: the test does not exercise the candidates", narrowed)
	}
}
