package interpodaffinity

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const (
	zone = "topology.kubernetes.io/zone"
	host = "kubernetes.io/hostname"
)

func node(name, z string) *st.NodeWrapper {
	w := st.Node(name).Label(host, name)
	if z != "" {
		w.Label(zone, z)
	}
	return w
}

func web(uid string) *st.PodWrapper { return st.Pod(uid, uid).Labels("app", "web") }

func sel(kv ...string) *pb.LabelSelector { return st.Selector(kv) }

// snapshot places existing pods (node name -> pods) on nodes.
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

// The cases follow https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#inter-pod-affinity-and-anti-affinity.
func TestFilter(t *testing.T) {
	zones := []*st.NodeWrapper{node("n1", "a"), node("n2", "a"), node("n3", "b")}
	tests := []struct {
		name     string
		pod      *st.PodWrapper
		nodes    []*st.NodeWrapper
		existing map[string][]*st.PodWrapper
		want     map[string]string // node -> reason ("" fits)
	}{
		{"no affinity anywhere", st.Pod("p", "u"), zones, map[string][]*st.PodWrapper{"n1": {web("w1")}},
			map[string]string{"n1": "", "n2": "", "n3": ""}},
		{"required affinity: the zone of a matching pod", st.Pod("p", "u").PodAffinity(st.AffinityTerm(zone, sel("app", "web"))), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1")}},
			map[string]string{"n1": "", "n2": "", "n3": ErrReasonAffinityRulesNotMatch}},
		{"required affinity: a node without the topology key never fits", st.Pod("p", "u").PodAffinity(st.AffinityTerm(zone, sel("app", "web"))),
			[]*st.NodeWrapper{node("n1", "a"), node("n4", "")}, map[string][]*st.PodWrapper{"n4": {web("w1")}},
			map[string]string{"n1": ErrReasonAffinityRulesNotMatch, "n4": ErrReasonAffinityRulesNotMatch}},
		{"required affinity: no matching pod", st.Pod("p", "u").PodAffinity(st.AffinityTerm(zone, sel("app", "web"))), zones, nil,
			map[string]string{"n1": ErrReasonAffinityRulesNotMatch, "n2": ErrReasonAffinityRulesNotMatch, "n3": ErrReasonAffinityRulesNotMatch}},
		{"first pod of a group that matches its own affinity goes anywhere with the key",
			web("p").PodAffinity(st.AffinityTerm(zone, sel("app", "web"))), []*st.NodeWrapper{node("n1", "a"), node("n3", "b"), node("n4", "")}, nil,
			map[string]string{"n1": "", "n3": "", "n4": ErrReasonAffinityRulesNotMatch}},
		{"not the first pod once one matches", web("p").PodAffinity(st.AffinityTerm(zone, sel("app", "web"))), zones,
			map[string][]*st.PodWrapper{"n3": {web("w1")}},
			map[string]string{"n1": ErrReasonAffinityRulesNotMatch, "n2": ErrReasonAffinityRulesNotMatch, "n3": ""}},
		{"all affinity terms must match the same pod",
			st.Pod("p", "u").PodAffinity(st.AffinityTerm(zone, sel("app", "web"))).PodAffinity(st.AffinityTerm(zone, sel("tier", "front"))), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1")}, "n3": {web("w2").Labels("tier", "front")}},
			map[string]string{"n1": ErrReasonAffinityRulesNotMatch, "n2": ErrReasonAffinityRulesNotMatch, "n3": ""}},
		{"affinity only counts pods of the pod's namespace by default", st.Pod("p", "u").PodAffinity(st.AffinityTerm(zone, sel("app", "web"))), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1").Namespace("other")}},
			map[string]string{"n1": ErrReasonAffinityRulesNotMatch, "n2": ErrReasonAffinityRulesNotMatch, "n3": ErrReasonAffinityRulesNotMatch}},
		{"affinity with listed namespaces", st.Pod("p", "u").PodAffinity(st.AffinityTerm(zone, sel("app", "web"), "other")), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1").Namespace("other")}},
			map[string]string{"n1": "", "n2": "", "n3": ErrReasonAffinityRulesNotMatch}},
		{"an empty namespaceSelector selects every namespace", st.Pod("p", "u").PodAffinity(&pb.PodAffinityTerm{TopologyKey: zone,
			LabelSelector: sel("app", "web"), NamespaceSelector: &pb.LabelSelector{}}), zones,
			map[string][]*st.PodWrapper{"n3": {web("w1").Namespace("other")}},
			map[string]string{"n1": ErrReasonAffinityRulesNotMatch, "n2": ErrReasonAffinityRulesNotMatch, "n3": ""}},
		{"namespaceSelector on the namespace name label", st.Pod("p", "u").PodAffinity(&pb.PodAffinityTerm{TopologyKey: zone,
			LabelSelector: sel("app", "web"), NamespaceSelector: sel(framework.LabelNamespaceName, "other")}), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1").Namespace("other")}, "n3": {web("w2").Namespace("third")}},
			map[string]string{"n1": "", "n2": "", "n3": ErrReasonAffinityRulesNotMatch}},
		{"required anti-affinity per host", st.Pod("p", "u").PodAntiAffinity(st.AffinityTerm(host, sel("app", "web"))), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1")}},
			map[string]string{"n1": ErrReasonAntiAffinityRulesNotMatch, "n2": "", "n3": ""}},
		{"required anti-affinity per zone", st.Pod("p", "u").PodAntiAffinity(st.AffinityTerm(zone, sel("app", "web"))), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1")}},
			map[string]string{"n1": ErrReasonAntiAffinityRulesNotMatch, "n2": ErrReasonAntiAffinityRulesNotMatch, "n3": ""}},
		{"anti-affinity on a key the node lacks does not block", st.Pod("p", "u").PodAntiAffinity(st.AffinityTerm(zone, sel("app", "web"))),
			[]*st.NodeWrapper{node("n4", ""), node("n5", "")}, map[string][]*st.PodWrapper{"n4": {web("w1")}},
			map[string]string{"n4": "", "n5": ""}},
		{"anti-affinity matchExpressions In/NotIn",
			st.Pod("p", "u").PodAntiAffinity(st.AffinityTerm(host, st.Selector(nil, st.LabelExpr("app", "In", "web", "db"), st.LabelExpr("env", "NotIn", "dev")))), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1")}, "n2": {web("w2").Labels("env", "dev")}, "n3": {st.Pod("c", "c").Labels("app", "cache")}},
			map[string]string{"n1": ErrReasonAntiAffinityRulesNotMatch, "n2": "", "n3": ""}},
		{"anti-affinity matchExpressions Exists/DoesNotExist",
			st.Pod("p", "u").PodAntiAffinity(st.AffinityTerm(host, st.Selector(nil, st.LabelExpr("app", "Exists"), st.LabelExpr("canary", "DoesNotExist")))), zones,
			map[string][]*st.PodWrapper{"n1": {st.Pod("x", "x").Labels("app", "x")}, "n2": {st.Pod("y", "y").Labels("app", "y", "canary", "1")}, "n3": {st.Pod("z", "z")}},
			map[string]string{"n1": ErrReasonAntiAffinityRulesNotMatch, "n2": "", "n3": ""}},
		{"existing pods' anti-affinity blocks the pod (symmetry)", st.Pod("p", "u").Labels("app", "db"), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1").PodAntiAffinity(st.AffinityTerm(zone, sel("app", "db")))}},
			map[string]string{"n1": ErrReasonExistingAntiAffinityRulesNotMatch, "n2": ErrReasonExistingAntiAffinityRulesNotMatch, "n3": ""}},
		{"existing pods' anti-affinity in another namespace does not select the pod", st.Pod("p", "u").Labels("app", "db"), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1").Namespace("other").PodAntiAffinity(st.AffinityTerm(zone, sel("app", "db")))}},
			map[string]string{"n1": "", "n2": "", "n3": ""}},
		{"a nil labelSelector selects nothing", st.Pod("p", "u").PodAntiAffinity(st.AffinityTerm(host, nil)), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1")}}, map[string]string{"n1": "", "n2": "", "n3": ""}},
		{"an empty labelSelector selects every pod", st.Pod("p", "u").PodAntiAffinity(st.AffinityTerm(host, &pb.LabelSelector{})), zones,
			map[string][]*st.PodWrapper{"n1": {web("w1")}}, map[string]string{"n1": ErrReasonAntiAffinityRulesNotMatch, "n2": "", "n3": ""}},
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
				if pre.Code() != framework.Skip { // Skip: the framework does not run Filter
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

func TestFilterCodes(t *testing.T) {
	if statusAffinity.Code() != framework.UnschedulableAndUnresolvable || statusAntiAffinity.Code() != framework.Unschedulable ||
		statusExistingAntiAff.Code() != framework.Unschedulable {
		t.Error("codes differ from kube-scheduler's (affinity unresolvable, anti-affinity resolvable by preemption)")
	}
}

func TestScore(t *testing.T) {
	nodes := []*st.NodeWrapper{node("n1", "a"), node("n2", "a"), node("n3", "b")}
	tests := []struct {
		name     string
		pod      *st.PodWrapper
		existing map[string][]*st.PodWrapper
		want     map[string]int64 // nil: the plugin skips
	}{
		{"nothing preferred", st.Pod("p", "u"), map[string][]*st.PodWrapper{"n1": {web("w1")}}, nil},
		{"preferred affinity to a zone", st.Pod("p", "u").PreferredPodAffinity(5, st.AffinityTerm(zone, sel("app", "web"))),
			map[string][]*st.PodWrapper{"n1": {web("w1")}}, map[string]int64{"n1": 100, "n2": 100, "n3": 0}},
		{"preferred anti-affinity to a zone", st.Pod("p", "u").PreferredPodAntiAffinity(5, st.AffinityTerm(zone, sel("app", "web"))),
			map[string][]*st.PodWrapper{"n1": {web("w1")}}, map[string]int64{"n1": 0, "n2": 0, "n3": 100}},
		{"weights add up per matching pod", st.Pod("p", "u").PreferredPodAffinity(10, st.AffinityTerm(host, sel("app", "web"))).
			PreferredPodAntiAffinity(5, st.AffinityTerm(host, sel("app", "db"))),
			map[string][]*st.PodWrapper{"n1": {web("w1"), web("w2")}, "n2": {web("w3"), st.Pod("d", "d").Labels("app", "db")}},
			// raw: n1 20, n2 10-5=5, n3 0 -> (x-0)/20
			map[string]int64{"n1": 100, "n2": 25, "n3": 0}},
		{"existing pods' preferred affinity attracts the pod (symmetry)", st.Pod("p", "u").Labels("app", "db"),
			map[string][]*st.PodWrapper{"n3": {web("w1").PreferredPodAffinity(3, st.AffinityTerm(zone, sel("app", "db")))}},
			map[string]int64{"n1": 0, "n2": 0, "n3": 100}},
		{"existing pods' preferred anti-affinity repels it", st.Pod("p", "u").Labels("app", "db"),
			map[string][]*st.PodWrapper{"n3": {web("w1").PreferredPodAntiAffinity(3, st.AffinityTerm(zone, sel("app", "db")))}},
			map[string]int64{"n1": 100, "n2": 100, "n3": 0}},
		{"existing pods' required affinity counts at hardPodAffinityWeight", st.Pod("p", "u").Labels("app", "db"),
			map[string][]*st.PodWrapper{"n1": {web("w1").PodAffinity(st.AffinityTerm(host, sel("app", "db")))}},
			map[string]int64{"n1": 100, "n2": 0, "n3": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			state := framework.NewCycleState()
			snap := snapshot(nodes, tt.existing)
			state.SetSnapshot(snap)
			pod := tt.pod.Info()
			if st := p.PreScore(state, pod, snap.Nodes()); st.Code() == framework.Skip {
				if tt.want != nil {
					t.Fatal("PreScore skipped")
				}
				return
			} else if !st.IsSuccess() {
				t.Fatal(st.Message())
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
			p.NormalizeScore(state, pod, scores)
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

// Replicas with the same labels and terms on one node are counted as a group: taking one of two away
// (preemption's RemovePod) must leave the node blocked, taking both must free it, for the pod's own
// anti-affinity and for the symmetric one of the placed pods.
func TestGroupedPodsCountEach(t *testing.T) {
	antiWeb := func(uid string) *st.PodWrapper {
		return web(uid).PodAntiAffinity(st.AffinityTerm(host, sel("app", "web")))
	}
	tests := []struct {
		name string
		pod  *st.PodWrapper
	}{
		{"the pod's own anti-affinity", antiWeb("p")},
		{"the placed pods' anti-affinity (symmetry)", web("p")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := []*st.NodeWrapper{node("n1", "a")}
			snap := snapshot(nodes, map[string][]*st.PodWrapper{"n1": {antiWeb("w1"), antiWeb("w2")}})
			n1 := snap.Get("n1")
			if len(n1.LabelSets) != 1 || n1.LabelSets[0].Count != 2 || len(n1.RequiredAntiAffinityTerms) != 1 || n1.RequiredAntiAffinityTerms[0].Count != 2 {
				t.Fatalf("groups: %+v / %+v, want one of 2 each", n1.LabelSets, n1.RequiredAntiAffinityTerms)
			}
			pl := New()
			state := framework.NewCycleState()
			state.SetSnapshot(snap)
			pod := tt.pod.Info()
			if s := pl.PreFilter(state, pod); !s.IsSuccess() {
				t.Fatalf("prefilter: %v", s)
			}
			blocked := func() bool { return !pl.Filter(state, pod, n1).IsSuccess() }
			if !blocked() {
				t.Fatal("n1 fits with two matching pods on it")
			}
			placed := n1.Pods
			if s := pl.RemovePod(state, pod, placed[0], n1); !s.IsSuccess() {
				t.Fatal(s)
			}
			if !blocked() {
				t.Error("n1 fits with one of the two matching pods still on it")
			}
			if s := pl.RemovePod(state, pod, placed[1], n1); !s.IsSuccess() {
				t.Fatal(s)
			}
			if blocked() {
				t.Error("n1 still blocked with both matching pods removed")
			}
		})
	}
}

// Required anti-affinity counted per domain on demand agrees with the rule read directly (every placed
// pod of the node's domain against the pod's terms, and every placed pod's terms against the pod),
// on random clusters with zones of several nodes, nodes without a zone, and hostname domains (in some
// rounds a node without a hostname label, so that not every node is its own domain); and after a
// RemovePod, as preemption calls it.
func TestAntiAffinityPerDomainMatchesTheRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	changed := 0
	apps := []string{"a", "b", "c"}
	keys := []string{zone, host}
	mkPod := func(uid string) *st.PodWrapper {
		p := st.Pod(uid, uid).Labels("app", apps[rng.IntN(len(apps))])
		if rng.IntN(2) == 0 {
			p.PodAntiAffinity(st.AffinityTerm(keys[rng.IntN(2)], sel("app", apps[rng.IntN(len(apps))])))
		}
		return p
	}
	for round := range 50 {
		var nodes []*st.NodeWrapper
		existing := map[string][]*st.PodWrapper{}
		for i := range 12 {
			name, z := fmt.Sprintf("n%02d", i), fmt.Sprintf("z%d", rng.IntN(3))
			if rng.IntN(6) == 0 {
				z = ""
			}
			n := node(name, z)
			if round%4 == 3 && i == 5 {
				n = st.Node(name)
				if z != "" {
					n.Label(zone, z)
				}
			}
			nodes = append(nodes, n)
			for j := range rng.IntN(3) {
				existing[name] = append(existing[name], mkPod(fmt.Sprintf("%s-%d", name, j)))
			}
		}
		snap := snapshot(nodes, existing)
		pod := mkPod("new").Info()
		// The rule, read directly; victim (if not nil) is left out, as after RemovePod.
		rule := func(n *framework.NodeInfo, victim *framework.PlacedPod) string {
			ns, labels := pod.Pod.GetMetadata().GetNamespace(), pod.Pod.GetMetadata().GetLabels()
			var own, sym bool
			for _, m := range snap.Nodes() {
				for _, q := range m.Pods {
					if q == victim {
						continue
					}
					if pod.Affinity != nil {
						for _, term := range pod.Affinity.RequiredAntiAffinity {
							v, ok := n.Labels[term.TopologyKey]
							if ok && m.Labels[term.TopologyKey] == v && term.Matches(q.Namespace, q.Labels) {
								own = true
							}
						}
					}
					if q.Affinity != nil {
						for _, term := range q.Affinity.RequiredAntiAffinity {
							v, ok := m.Labels[term.TopologyKey]
							if ok && n.Labels[term.TopologyKey] == v && term.Matches(ns, labels) {
								sym = true
							}
						}
					}
				}
			}
			switch {
			case own:
				return ErrReasonAntiAffinityRulesNotMatch
			case sym:
				return ErrReasonExistingAntiAffinityRulesNotMatch
			}
			return ""
		}
		p := New()
		state := framework.NewCycleState()
		state.SetSnapshot(snap)
		skipped := p.PreFilter(state, pod).Code() == framework.Skip
		for _, n := range snap.Nodes() {
			got := ""
			if !skipped {
				got = p.Filter(state, pod, n).Message()
			}
			if want := rule(n, nil); got != want {
				t.Fatalf("round %d, node %s: Filter %q, the rule %q", round, n.Name(), got, want)
			}
		}
		if skipped {
			continue
		}
		// Each placed pod in turn as a victim, taken out of a clone of the state.
		for _, victimNode := range snap.Nodes() {
			for _, victim := range victimNode.Pods {
				after := state.Clone()
				if st := p.RemovePod(after, pod, victim, victimNode); !st.IsSuccess() {
					t.Fatal(st.Message())
				}
				for _, n := range snap.Nodes() {
					got, want := p.Filter(after, pod, n).Message(), rule(n, victim)
					if got != want {
						t.Fatalf("round %d, node %s, without %s: Filter %q, the rule %q", round, n.Name(), victim.Name, got, want)
					}
					if want != rule(n, nil) {
						changed++
					}
					if n == victimNode {
						// As preemption calls it: the node without the victim, with the state's change.
						if got := p.Filter(after, pod, n.WithoutPods(victim.UID)).Message(); got != want {
							t.Fatalf("round %d, node %s taken without %s: Filter %q, the rule %q", round, n.Name(), victim.Name, got, want)
						}
					}
				}
			}
		}
	}
	if changed == 0 {
		t.Error("no victim ever changed a verdict: the RemovePod checks prove nothing")
	}
}
