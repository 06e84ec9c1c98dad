package defaultpreemption_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/defaultpreemption"
	"github.com/podbus/podbus/sched/plugins/interpodaffinity"
	"github.com/podbus/podbus/sched/plugins/noderesources"
	"github.com/podbus/podbus/sched/plugins/podtopologyspread"
	st "github.com/podbus/podbus/sched/schedtest"
)

const hostname = "kubernetes.io/hostname"

// hostNode is a 4-core node labelled with its hostname, holding pods.
func hostNode(name string, pods ...*st.PodWrapper) *framework.NodeInfo {
	var pps []*framework.PlacedPod
	for _, p := range pods {
		pps = append(pps, p.Placed())
	}
	return st.Node(name).Capacity("4", "8Gi", 110).Label(hostname, name).Ready().Info().WithPods(pps...)
}

// existing is a pod on a node: its uid is its name; it asks for cpu.
func existing(name string, prio int32, cpu string, labels ...string) *st.PodWrapper {
	return st.Pod(name, name).Priority(prio).Req(cpu, "").Labels(labels...)
}

func antiTerm(kv ...string) *pb.PodAffinityTerm {
	return &pb.PodAffinityTerm{TopologyKey: hostname, LabelSelector: st.Selector(kv)}
}

// The inter-pod plugins count pods over the whole snapshot in PreFilter; preemption must see those
// counts without the victims (AddPod/RemovePod on a cycle-state clone), as kube-scheduler does.
func TestPostFilterInterPod(t *testing.T) {
	webSpread := &pb.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: hostname, WhenUnsatisfiable: podtopologyspread.DoNotSchedule,
		LabelSelector: st.Selector([]string{"app", "web"})}
	tests := []struct {
		name        string
		pod         *st.PodWrapper
		nodes       []*framework.NodeInfo
		wantNode    string
		wantVictims []string
		wantMsg     string
	}{
		{
			name: "required anti-affinity against a low-priority pod on the only node: that pod goes, the other stays",
			pod:  existing("hi", 10, "1", "app", "api").PodAntiAffinity(antiTerm("app", "db")),
			nodes: []*framework.NodeInfo{hostNode("n1",
				existing("db", 1, "1", "app", "db"), existing("other", 1, "1", "app", "x"))},
			wantNode: "n1", wantVictims: []string{"db"},
		},
		{
			name: "an existing low-priority pod's anti-affinity against the preemptor (symmetry): it goes",
			pod:  existing("hi", 10, "1", "app", "api"),
			nodes: []*framework.NodeInfo{hostNode("n1",
				existing("loner", 1, "1", "app", "loner").PodAntiAffinity(antiTerm("app", "api")), existing("other", 1, "1", "app", "x"))},
			wantNode: "n1", wantVictims: []string{"loner"},
		},
		{
			name: "anti-affinity against a higher-priority pod: nothing to do",
			pod:  existing("hi", 10, "1", "app", "api").PodAntiAffinity(antiTerm("app", "db")),
			nodes: []*framework.NodeInfo{hostNode("n1",
				existing("db", 20, "1", "app", "db"), existing("other", 1, "1", "app", "x"))},
			wantMsg: "preemption: 0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules",
		},
		{
			// n1 holds 2 web pods, n2 1 (and no room): skew on n1 would be 2+1-1 > 1. Without both
			// low pods n1 counts 0; putting the more important one (a, first by uid) back keeps the skew
			// at 1, the second would not.
			name: "topology spread: the fewest matching pods go",
			pod:  existing("hi", 10, "1", "app", "web").Spread(webSpread),
			nodes: []*framework.NodeInfo{
				hostNode("n1", existing("a", 1, "1", "app", "web"), existing("b", 1, "1", "app", "web")),
				hostNode("n2", existing("c", 20, "4", "app", "web")),
			},
			wantNode: "n1", wantVictims: []string{"b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotNode, gotVictims, gotMsg := runPostFilter(t, []framework.Registration{
				{Plugin: noderesources.NewFit()},
				{Plugin: podtopologyspread.New()},
				{Plugin: interpodaffinity.New()},
				{Plugin: defaultpreemption.New()},
			}, tt.pod.Info(), tt.nodes)
			if gotMsg != tt.wantMsg {
				t.Errorf("message %q, want %q", gotMsg, tt.wantMsg)
			}
			if gotNode != tt.wantNode {
				t.Errorf("nominated %q, want %q", gotNode, tt.wantNode)
			}
			if diff := cmp.Diff(tt.wantVictims, gotVictims); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
		})
	}
}

// WithoutPods and WithPod keep the derived lists and the requests in step with Pods.
func TestNodeViews(t *testing.T) {
	n := hostNode("n1", existing("a", 1, "1", "app", "a").PodAntiAffinity(antiTerm("app", "x")),
		existing("b", 1, "1", "app", "b"))
	without := n.WithoutPods("a")
	if len(without.Pods) != 1 || len(without.PodsWithAffinity) != 0 || len(without.PodsWithRequiredAntiAffinity) != 0 ||
		without.Requested.MilliCPU != 1000 || without.Requested.Pods != 1 {
		t.Errorf("without a: %d pods, %d with affinity, %d with anti-affinity, requested %v",
			len(without.Pods), len(without.PodsWithAffinity), len(without.PodsWithRequiredAntiAffinity), without.Requested)
	}
	if len(n.Pods) != 2 || len(n.PodsWithRequiredAntiAffinity) != 1 || n.Requested.MilliCPU != 2000 {
		t.Error("WithoutPods changed the original")
	}
	back := without.WithPod(n.Pods[0])
	if len(back.Pods) != 2 || len(back.PodsWithRequiredAntiAffinity) != 1 || back.Requested.MilliCPU != 2000 ||
		back.NonZeroMilliCPU != n.NonZeroMilliCPU || back.NonZeroMemory != n.NonZeroMemory {
		t.Errorf("a put back: %+v", back)
	}
}
