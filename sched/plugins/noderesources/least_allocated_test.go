package noderesources

import (
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const mi = 1 << 20

// Cases after Kubernetes' least_allocated_test.go: score = mean over cpu and memory of
// (allocatable - requested) * 100 / allocatable, integer arithmetic.
func TestLeastAllocated(t *testing.T) {
	pod := st.Pod("p", "u").Req("2", "4Gi")
	tests := []struct {
		name string
		pod  *st.PodWrapper
		node *st.NodeWrapper
		used *pb.Resources
		want int64
	}{
		// cpu (4000-0-100)*100/4000 = 97, memory (10000Mi-200Mi)*100/10000Mi = 98 -> 97
		{"nothing requested: defaults count", st.Pod("p", "u"), st.Node("n").Capacity("4", "10000Mi", 110), &pb.Resources{}, 97},
		// cpu (4000-3000)*100/4000 = 25, memory (10000-5000)*100/10000 = 50 -> 37
		{"half memory, 3/4 cpu", st.Pod("p", "u").Req("3", "5000Mi"), st.Node("n").Capacity("4", "10000Mi", 110), &pb.Resources{}, 37},
		// existing 1000m/2000Mi + pod 2000m/3000Mi: cpu 25, memory 50 -> 37
		{"counts what is on the node", st.Pod("p", "u").Req("2", "3000Mi"), st.Node("n").Capacity("4", "10000Mi", 110),
			&pb.Resources{MilliCpu: 1000, Memory: 2000 * mi}, 37},
		{"over capacity scores 0", st.Pod("p", "u").Req("8", "20000Mi"), st.Node("n").Capacity("4", "10000Mi", 110), &pb.Resources{}, 0},
		// only memory declared: cpu is left out of the mean
		{"node without cpu", st.Pod("p", "u").Req("", "5000Mi"), st.Node("n").Capacity("", "10000Mi", 110), &pb.Resources{}, 50},
		{"node without cpu and memory", st.Pod("p", "u"), st.Node("n").Capacity("", "", 110), &pb.Resources{}, 0},
		// Node shapes for a 2-cpu/4Gi pod (kube-scheduler v1.37, weights cpu=1 memory=1, each term and
		// the mean truncated):
		// cpu 2000*100/4000 = 50, memory 28Gi*100/32Gi = 87 -> (50+87)/2 = 68
		{"4 cpu / 32Gi", pod, st.Node("n").Capacity("4", "32Gi", 110), &pb.Resources{}, 68},
		// cpu 30000*100/32000 = 93, memory 4Gi*100/8Gi = 50 -> 143/2 = 71
		{"32 cpu / 8Gi", pod, st.Node("n").Capacity("32", "8Gi", 110), &pb.Resources{}, 71},
		// cpu 6000*100/8000 = 75, memory 12Gi*100/16Gi = 75 -> 75
		{"balanced 8 cpu / 16Gi", pod, st.Node("n").Capacity("8", "16Gi", 110), &pb.Resources{}, 75},
		// 2 cpu and 16Gi already requested: cpu 0*100/4000 = 0, memory 12Gi*100/32Gi = 37 -> 37/2 = 18
		{"4 cpu / 32Gi, half full", pod, st.Node("n").Capacity("4", "32Gi", 110), &pb.Resources{MilliCpu: 2000, Memory: 16 << 30}, 18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, status := NewLeastAllocated().Score(framework.NewCycleState(), tt.pod.Info(), tt.node.InfoRequested(tt.used))
			if !status.IsSuccess() {
				t.Fatalf("status %v", status.Message())
			}
			if got != tt.want {
				t.Errorf("score = %d, want %d", got, tt.want)
			}
		})
	}
}
