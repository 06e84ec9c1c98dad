package tainttoleration

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

// Cases from the Kubernetes docs ("Taints and Tolerations"). The reason is kube-scheduler v1.37's
// fixed text, one per node: it names no taint.
func TestFilter(t *testing.T) {
	untolerated := []string{"node(s) had untolerated taint(s)"}
	tests := []struct {
		name string
		pod  *st.PodWrapper
		node *st.NodeWrapper
		want []string
	}{
		{"no taints", st.Pod("p", "u"), st.Node("n"), nil},
		{"untolerated NoSchedule", st.Pod("p", "u"), st.Node("n").Taint("key1", "value1", "NoSchedule"), untolerated},
		{"untolerated NoExecute", st.Pod("p", "u"), st.Node("n").Taint("dedicated", "gpu", "NoExecute"), untolerated},
		{"PreferNoSchedule does not filter", st.Pod("p", "u"), st.Node("n").Taint("key1", "value1", "PreferNoSchedule"), nil},
		{"Equal toleration", st.Pod("p", "u").Toleration("key1", "Equal", "value1", "NoSchedule"), st.Node("n").Taint("key1", "value1", "NoSchedule"), nil},
		{"empty operator means Equal", st.Pod("p", "u").Toleration("key1", "", "value1", "NoSchedule"), st.Node("n").Taint("key1", "value1", "NoSchedule"), nil},
		{"Equal toleration, other value", st.Pod("p", "u").Toleration("key1", "Equal", "value2", "NoSchedule"), st.Node("n").Taint("key1", "value1", "NoSchedule"), untolerated},
		{"Exists toleration", st.Pod("p", "u").Toleration("key1", "Exists", "", "NoSchedule"), st.Node("n").Taint("key1", "value1", "NoSchedule"), nil},
		{"empty effect matches all effects", st.Pod("p", "u").Toleration("key1", "Exists", "", ""), st.Node("n").Taint("key1", "v", "NoExecute"), nil},
		{"empty key with Exists tolerates everything", st.Pod("p", "u").Toleration("", "Exists", "", ""), st.Node("n").Taint("a", "1", "NoSchedule").Taint("b", "2", "NoExecute"), nil},
		{"toleration for another effect", st.Pod("p", "u").Toleration("key1", "Exists", "", "NoExecute"), st.Node("n").Taint("key1", "value1", "NoSchedule"), untolerated},
		{"every taint must be tolerated; one reason for several untolerated", st.Pod("p", "u").Toleration("key1", "Equal", "value1", "NoSchedule"),
			st.Node("n").Taint("key1", "value1", "NoSchedule").Taint("key2", "", "NoSchedule").Taint("key3", "x", "NoExecute"), untolerated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := New().Filter(framework.NewCycleState(), tt.pod.Info(), tt.node.Info())
			if diff := cmp.Diff(tt.want, got.Reasons()); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			if tt.want != nil && got.Code() != framework.UnschedulableAndUnresolvable {
				t.Errorf("code = %v", got.Code())
			}
		})
	}
}

// As Kubernetes' TestTaintTolerationScore: fewer untolerated PreferNoSchedule taints score higher.
func TestScore(t *testing.T) {
	tests := []struct {
		name  string
		pod   *st.PodWrapper
		nodes []*st.NodeWrapper
		want  []int64
	}{
		{"no taints anywhere", st.Pod("p", "u"), []*st.NodeWrapper{st.Node("a"), st.Node("b")}, []int64{100, 100}},
		{"one untolerated vs none", st.Pod("p", "u"),
			[]*st.NodeWrapper{st.Node("a"), st.Node("b").Taint("k", "v", "PreferNoSchedule")}, []int64{100, 0}},
		{"counts are relative", st.Pod("p", "u"),
			[]*st.NodeWrapper{
				st.Node("a"),
				st.Node("b").Taint("k1", "v", "PreferNoSchedule"),
				st.Node("c").Taint("k1", "v", "PreferNoSchedule").Taint("k2", "v", "PreferNoSchedule"),
			}, []int64{100, 50, 0}},
		{"tolerated PreferNoSchedule taints do not count", st.Pod("p", "u").Toleration("k1", "Equal", "v", "PreferNoSchedule"),
			[]*st.NodeWrapper{st.Node("a"), st.Node("b").Taint("k1", "v", "PreferNoSchedule")}, []int64{100, 100}},
		{"a NoSchedule toleration does not tolerate PreferNoSchedule", st.Pod("p", "u").Toleration("k1", "Exists", "", "NoSchedule"),
			[]*st.NodeWrapper{st.Node("a"), st.Node("b").Taint("k1", "v", "PreferNoSchedule")}, []int64{100, 0}},
		{"NoSchedule taints are not scored", st.Pod("p", "u").Toleration("k1", "Exists", "", ""),
			[]*st.NodeWrapper{st.Node("a"), st.Node("b").Taint("k1", "v", "NoSchedule")}, []int64{100, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, state, pod := New(), framework.NewCycleState(), tt.pod.Info()
			scores := make([]framework.NodeScore, len(tt.nodes))
			for i, n := range tt.nodes {
				ni := n.Info()
				s, _ := p.Score(state, pod, ni)
				scores[i] = framework.NodeScore{Node: ni, Score: s}
			}
			p.NormalizeScore(state, pod, scores)
			got := make([]int64, len(scores))
			for i := range scores {
				got[i] = scores[i].Score
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFilterAllocations(t *testing.T) {
	p := New()
	pod := st.Pod("p", "u").Info()
	node := st.Node("n").Taint("k", "v", "NoSchedule").Info()
	p.Filter(framework.NewCycleState(), pod, node)
	if n := testing.AllocsPerRun(100, func() { p.Filter(nil, pod, node) }); n != 0 {
		t.Errorf("%v allocations per rejection", n)
	}
}
