package balancedallocation

import (
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const gi = 1 << 30

// Cases in the spirit of kube-scheduler's balanced_allocation_test: score = (1 − |f_cpu − f_mem| / 2) × 100.
func TestScore(t *testing.T) {
	tests := []struct {
		name string
		pod  *st.PodWrapper
		node *framework.NodeInfo
		want int64
		skip bool
	}{
		{"best effort pod is skipped", st.Pod("p", "u"), st.Node("n").Capacity("4", "8Gi", 110).Info(), 0, true},
		{"equal shares", st.Pod("p", "u").Req("2", "4Gi"), st.Node("n").Capacity("4", "8Gi", 110).Info(), 100, false},
		// cpu 3/4 = 0.75, memory 0/8 = 0 -> std 0.375 -> 62
		{"cpu only", st.Pod("p", "u").Req("3", ""), st.Node("n").Capacity("4", "8Gi", 110).Info(), 62, false},
		// node already uses 2 cpu, 1Gi; pod adds 1 cpu, 3Gi: 0.75 vs 0.5 -> std 0.125 -> 87
		{"with requested", st.Pod("p", "u").Req("1", "3Gi"), st.Node("n").Capacity("4", "8Gi", 110).InfoRequested(&pb.Resources{MilliCpu: 2000, Memory: 1 * gi}), 87, false},
		// fractions are capped at 1: cpu 6/4 -> 1, memory 0.5 -> std 0.25 -> 75
		{"over capacity caps at 1", st.Pod("p", "u").Req("6", "4Gi"), st.Node("n").Capacity("4", "8Gi", 110).Info(), 75, false},
		{"node without memory: one resource, std 0", st.Pod("p", "u").Req("1", "1Gi"), st.Node("n").Capacity("4", "", 110).Info(), 100, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, pod, state := New(), tt.pod.Info(), framework.NewCycleState()
			if got := p.PreScore(state, pod, nil).Code() == framework.Skip; got != tt.skip {
				t.Fatalf("skip = %v, want %v", got, tt.skip)
			}
			if tt.skip {
				return
			}
			if got, _ := p.Score(state, pod, tt.node); got != tt.want {
				t.Errorf("score = %d, want %d", got, tt.want)
			}
		})
	}
}
