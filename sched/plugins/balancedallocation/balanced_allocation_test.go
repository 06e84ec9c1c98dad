package balancedallocation

import (
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const gi = 1 << 30

// Expected values by hand from kube-scheduler v1.37's formula:
//
//	balance = int((1 − |f_cpu − f_mem| / 2) × 100), fractions capped at 1
//	score   = 50 + (50 + balance(with pod) − balance(without pod)) / 2
//
// The fractions are chosen exact in binary so that truncation is not at the mercy of rounding.
func TestScore(t *testing.T) {
	pod := st.Pod("p", "u").Req("2", "4Gi")
	tests := []struct {
		name string
		pod  *st.PodWrapper
		node *framework.NodeInfo
		want int64
		skip bool
	}{
		{"best effort pod is skipped", st.Pod("p", "u"), st.Node("n").Capacity("4", "8Gi", 110).Info(), 0, true},
		// with: 2/4 = 0.5, 4/32 = 0.125 -> std 0.1875 -> 81; without: 0, 0 -> 100; 50 + (50+81-100)/2 = 65
		{"4 cpu / 32Gi, empty", pod, st.Node("n").Capacity("4", "32Gi", 110).Info(), 65, false},
		// with: 2/32 = 0.0625, 4/8 = 0.5 -> std 0.21875 -> 78; without 100; 50 + 28/2 = 64
		{"32 cpu / 8Gi, empty", pod, st.Node("n").Capacity("32", "8Gi", 110).Info(), 64, false},
		// with: 2/8 = 4/16 = 0.25 -> 100; without 100; 50 + 50/2 = 75 (balance unchanged)
		{"balanced 8 cpu / 16Gi, empty", pod, st.Node("n").Capacity("8", "16Gi", 110).Info(), 75, false},
		// with: 4/4 = 1, 20/32 = 0.625 -> std 0.1875 -> 81; without: 0.5, 0.5 -> 100; 50 + 31/2 = 65
		{"4 cpu / 32Gi, half full", pod, st.Node("n").Capacity("4", "32Gi", 110).InfoRequested(&pb.Resources{MilliCpu: 2000, Memory: 16 * gi}), 65, false},
		// with: 6/8 = 0.75, 6/16 = 0.375 -> 81; without: 0.5, 0.125 -> 81; 50 + 50/2 = 75
		{"8 cpu / 16Gi, half the cpu used", pod, st.Node("n").Capacity("8", "16Gi", 110).InfoRequested(&pb.Resources{MilliCpu: 4000, Memory: 2 * gi}), 75, false},
		// memory only evens out a cpu-heavy node: with 0.5, 0.5 -> 100; without 0.5, 0 -> 75; 50 + 75/2 = 87
		{"pod evens the node out", st.Pod("p", "u").Req("", "8Gi"), st.Node("n").Capacity("8", "16Gi", 110).InfoRequested(&pb.Resources{MilliCpu: 4000}), 87, false},
		// cpu only tips an even node: with 1, 0 -> 50; without 0, 0 -> 100; 50 + 0/2 = 50
		{"pod tips an even node", st.Pod("p", "u").Req("4", ""), st.Node("n").Capacity("4", "8Gi", 110).Info(), 50, false},
		// cpu capped at 1: with 5/4 -> 1, 4/32 = 0.125 -> std 0.4375 -> 56; without 0.75, 0 -> 62; 50 + 44/2 = 72
		{"requested beyond allocatable caps at 1", pod, st.Node("n").Capacity("4", "32Gi", 110).InfoRequested(&pb.Resources{MilliCpu: 3000}), 72, false},
		// a node already over its allocatable (both fractions capped): 100 and 100 -> 75
		{"node over allocatable", pod, st.Node("n").Capacity("4", "8Gi", 110).InfoRequested(&pb.Resources{MilliCpu: 5000, Memory: 9 * gi}), 75, false},
		// one resource: std 0 with and without the pod -> 75
		{"node without memory: one resource", st.Pod("p", "u").Req("1", "1Gi"), st.Node("n").Capacity("4", "", 110).Info(), 75, false},
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
			got, st := p.Score(state, pod, tt.node)
			if !st.IsSuccess() {
				t.Fatalf("status %v", st.Message())
			}
			if got != tt.want {
				t.Errorf("score = %d, want %d", got, tt.want)
			}
		})
	}
}
