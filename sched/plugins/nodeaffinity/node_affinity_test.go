package nodeaffinity

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

// Cases from the Kubernetes docs ("Assigning Pods to Nodes") and node_affinity_test.go.
func TestFilter(t *testing.T) {
	node := st.Node("node-1").Label("disktype", "ssd").Label("topology.kubernetes.io/zone", "antarctica-east1").Label("cores", "8")
	mismatch := []string{ErrReasonPod}
	tests := []struct {
		name     string
		pod      *st.PodWrapper
		wantSkip bool
		want     []string
	}{
		{"no selector or affinity: skipped", st.Pod("p", "u"), true, nil},
		{"nodeSelector matches", st.Pod("p", "u").NodeSelector("disktype", "ssd"), false, nil},
		{"nodeSelector wrong value", st.Pod("p", "u").NodeSelector("disktype", "hdd"), false, mismatch},
		{"nodeSelector missing label", st.Pod("p", "u").NodeSelector("gpu", "true"), false, mismatch},
		{"nodeSelector entries are ANDed", st.Pod("p", "u").NodeSelector("disktype", "ssd").NodeSelector("cores", "4"), false, mismatch},
		{"In matches", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("topology.kubernetes.io/zone", "In", "antarctica-east1", "antarctica-west1"))), false, nil},
		{"In no match", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("topology.kubernetes.io/zone", "In", "antarctica-west1"))), false, mismatch},
		{"In without the label", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("missing", "In", "x"))), false, mismatch},
		{"NotIn matches other value", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("disktype", "NotIn", "hdd"))), false, nil},
		{"NotIn matches absent label", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("missing", "NotIn", "x"))), false, nil},
		{"NotIn rejects", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("disktype", "NotIn", "ssd"))), false, mismatch},
		{"Exists", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("disktype", "Exists"))), false, nil},
		{"DoesNotExist rejects", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("disktype", "DoesNotExist"))), false, mismatch},
		{"DoesNotExist matches", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("gpu", "DoesNotExist"))), false, nil},
		{"Gt matches", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("cores", "Gt", "4"))), false, nil},
		{"Gt equal rejects", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("cores", "Gt", "8"))), false, mismatch},
		{"Lt matches", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("cores", "Lt", "16"))), false, nil},
		{"Gt on a non-number label", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("disktype", "Gt", "1"))), false, mismatch},
		{"Gt with a bad value matches nothing", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("cores", "Gt", "x"))), false, mismatch},
		{"unknown operator matches nothing", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("cores", "Near", "8"))), false, mismatch},
		{"expressions in a term are ANDed", st.Pod("p", "u").RequiredTerm(st.Term(st.Expr("disktype", "In", "ssd"), st.Expr("cores", "Gt", "10"))), false, mismatch},
		{"terms are ORed", st.Pod("p", "u").
			RequiredTerm(st.Term(st.Expr("disktype", "In", "hdd"))).
			RequiredTerm(st.Term(st.Expr("cores", "Exists"))), false, nil},
		{"an empty term matches nothing", st.Pod("p", "u").RequiredTerm(st.Term()), false, mismatch},
		{"matchFields metadata.name", st.Pod("p", "u").RequiredTerm(st.FieldTerm("In", "node-1")), false, nil},
		{"matchFields other name", st.Pod("p", "u").RequiredTerm(st.FieldTerm("In", "node-2")), false, mismatch},
		{"nodeSelector and affinity must both match", st.Pod("p", "u").NodeSelector("disktype", "hdd").RequiredTerm(st.Term(st.Expr("cores", "Exists"))), false, mismatch},
		{"preferred only: filter skipped", st.Pod("p", "u").PreferredTerm(1, st.Term(st.Expr("gpu", "Exists"))), true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, state := New(), framework.NewCycleState()
			pod := tt.pod.Info()
			if got := p.PreFilter(state, pod).Code() == framework.Skip; got != tt.wantSkip {
				t.Errorf("skip = %v, want %v", got, tt.wantSkip)
			}
			got := p.Filter(state, pod, node.Info())
			if diff := cmp.Diff(tt.want, got.Reasons()); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScore(t *testing.T) {
	nodes := []*framework.NodeInfo{
		st.Node("a").Label("zone", "z1").Label("disktype", "ssd").Info(),
		st.Node("b").Label("zone", "z1").Info(),
		st.Node("c").Label("zone", "z2").Info(),
	}
	tests := []struct {
		name string
		pod  *st.PodWrapper
		want []int64 // normalised, per node
	}{
		{"no preferences", st.Pod("p", "u"), []int64{0, 0, 0}},
		{"one preference", st.Pod("p", "u").PreferredTerm(5, st.Term(st.Expr("zone", "In", "z1"))), []int64{100, 100, 0}},
		{"weights add up", st.Pod("p", "u").
			PreferredTerm(1, st.Term(st.Expr("zone", "In", "z1"))).
			PreferredTerm(3, st.Term(st.Expr("disktype", "In", "ssd"))), []int64{100, 25, 0}},
		{"weight 0 and empty terms are ignored", st.Pod("p", "u").
			PreferredTerm(0, st.Term(st.Expr("zone", "In", "z2"))).
			PreferredTerm(5, st.Term()), []int64{0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, state := New(), framework.NewCycleState()
			pod := tt.pod.Info()
			p.PreFilter(state, pod)
			scores := make([]framework.NodeScore, len(nodes))
			for i, n := range nodes {
				s, st := p.Score(state, pod, n)
				if !st.IsSuccess() {
					t.Fatal(st.Message())
				}
				scores[i] = framework.NodeScore{Node: n, Score: s}
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
	p, state := New(), framework.NewCycleState()
	pod := st.Pod("p", "u").NodeSelector("disktype", "ssd").RequiredTerm(st.Term(st.Expr("zone", "In", "z1", "z2"))).Info()
	p.PreFilter(state, pod)
	node := st.Node("n").Label("disktype", "ssd").Label("zone", "z2").Info()
	if n := testing.AllocsPerRun(100, func() { p.Filter(state, pod, node) }); n != 0 {
		t.Errorf("%v allocations per filter", n)
	}
}
