package mostallocated

import (
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const mi = 1 << 20

// Cases after Kubernetes' most_allocated_test.go: score = mean over cpu and memory of
// requested * 100 / allocatable, integer arithmetic.
func TestMostAllocated(t *testing.T) {
	pod := st.Pod("p", "u").Req("2", "4Gi")
	tests := []struct {
		name string
		pod  *st.PodWrapper
		node *st.NodeWrapper
		used *pb.Resources
		want int64
	}{
		// cpu 100*100/4000 = 2, memory 200*100/10000 = 2 -> 2
		{"nothing requested: defaults count", st.Pod("p", "u"), st.Node("n").Capacity("4", "10000Mi", 110), &pb.Resources{}, 2},
		// cpu 3000*100/4000 = 75, memory 5000*100/10000 = 50 -> 62
		{"half memory, 3/4 cpu", st.Pod("p", "u").Req("3", "5000Mi"), st.Node("n").Capacity("4", "10000Mi", 110), &pb.Resources{}, 62},
		// existing 1000m/2000Mi + pod 2000m/3000Mi: cpu 75, memory 50 -> 62
		{"counts what is on the node", st.Pod("p", "u").Req("2", "3000Mi"), st.Node("n").Capacity("4", "10000Mi", 110),
			&pb.Resources{MilliCpu: 1000, Memory: 2000 * mi}, 62},
		{"over capacity counts as full", st.Pod("p", "u").Req("8", "20000Mi"), st.Node("n").Capacity("4", "10000Mi", 110), &pb.Resources{}, 100},
		{"node without cpu", st.Pod("p", "u").Req("", "5000Mi"), st.Node("n").Capacity("", "10000Mi", 110), &pb.Resources{}, 50},
		{"node without cpu and memory", st.Pod("p", "u"), st.Node("n").Capacity("", "", 110), &pb.Resources{}, 0},
		// Node shapes for a 2-cpu/4Gi pod (kube-scheduler v1.37, weights cpu=1 memory=1, each term and
		// the mean truncated):
		// cpu 2000*100/4000 = 50, memory 4Gi*100/32Gi = 12 -> 62/2 = 31
		{"4 cpu / 32Gi", pod, st.Node("n").Capacity("4", "32Gi", 110), &pb.Resources{}, 31},
		// cpu 2000*100/32000 = 6, memory 4Gi*100/8Gi = 50 -> 56/2 = 28
		{"32 cpu / 8Gi", pod, st.Node("n").Capacity("32", "8Gi", 110), &pb.Resources{}, 28},
		// cpu 2000*100/8000 = 25, memory 4Gi*100/16Gi = 25 -> 25
		{"balanced 8 cpu / 16Gi", pod, st.Node("n").Capacity("8", "16Gi", 110), &pb.Resources{}, 25},
		// 2 cpu and 16Gi already requested: cpu 4000*100/4000 = 100, memory 20Gi*100/32Gi = 62 -> 162/2 = 81
		{"4 cpu / 32Gi, half full", pod, st.Node("n").Capacity("4", "32Gi", 110), &pb.Resources{MilliCpu: 2000, Memory: 16 << 30}, 81},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, status := New().Score(framework.NewCycleState(), tt.pod.Info(), tt.node.InfoRequested(tt.used))
			if !status.IsSuccess() {
				t.Fatalf("status %v", status.Message())
			}
			if got != tt.want {
				t.Errorf("score = %d, want %d", got, tt.want)
			}
		})
	}
}
