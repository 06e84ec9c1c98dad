package noderesources

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const gi = 1 << 30

func TestFit(t *testing.T) {
	node := st.Node("n").Capacity("4", "8Gi", 3).Allocatable("example.com/gpu", "2").Allocatable("ephemeral-storage", "10Gi")
	tests := []struct {
		name string
		pod  *st.PodWrapper
		used *pb.Resources
		want []string
		code framework.Code
	}{
		{"fits on an empty node", st.Pod("p", "u").Req("1", "1Gi"), &pb.Resources{}, nil, framework.Success},
		{"exactly fills the node", st.Pod("p", "u").Req("1", "1Gi"), &pb.Resources{MilliCpu: 3000, Memory: 7 * gi, Pods: 2}, nil, framework.Success},
		{"no requests fit while pods are left", st.Pod("p", "u"), &pb.Resources{MilliCpu: 4000, Memory: 8 * gi, Pods: 2}, nil, framework.Success},
		{"insufficient cpu", st.Pod("p", "u").Req("1500m", ""), &pb.Resources{MilliCpu: 3000, Pods: 1}, []string{"Insufficient cpu"}, framework.Unschedulable},
		{"insufficient memory", st.Pod("p", "u").Req("", "2Gi"), &pb.Resources{Memory: 7 * gi}, []string{"Insufficient memory"}, framework.Unschedulable},
		{"insufficient cpu and memory", st.Pod("p", "u").Req("2", "2Gi"), &pb.Resources{MilliCpu: 3000, Memory: 7 * gi}, []string{"Insufficient cpu", "Insufficient memory"}, framework.Unschedulable},
		{"too many pods, even without requests", st.Pod("p", "u"), &pb.Resources{Pods: 3}, []string{"Too many pods"}, framework.Unschedulable},
		{"extended resource", st.Pod("p", "u").Request("example.com/gpu", "1"), &pb.Resources{Scalar: map[string]int64{"example.com/gpu": 2}}, []string{"Insufficient example.com/gpu"}, framework.Unschedulable},
		{"extended resource the node lacks", st.Pod("p", "u").Request("example.com/fpga", "1"), &pb.Resources{}, []string{"Insufficient example.com/fpga"}, framework.UnschedulableAndUnresolvable},
		{"ephemeral storage", st.Pod("p", "u").Request("ephemeral-storage", "4Gi"), &pb.Resources{EphemeralStorage: 8 * gi}, []string{"Insufficient ephemeral-storage"}, framework.Unschedulable},
		// More than the whole node: evicting pods cannot help.
		{"cpu beyond the node's allocatable", st.Pod("p", "u").Req("5", ""), &pb.Resources{}, []string{"Insufficient cpu"}, framework.UnschedulableAndUnresolvable},
		{"memory beyond the node's allocatable", st.Pod("p", "u").Req("", "9Gi"), &pb.Resources{Memory: 1 * gi}, []string{"Insufficient memory"}, framework.UnschedulableAndUnresolvable},
		{"one resource beyond the node makes the node unresolvable", st.Pod("p", "u").Req("5", "2Gi"), &pb.Resources{Memory: 7 * gi},
			[]string{"Insufficient cpu", "Insufficient memory"}, framework.UnschedulableAndUnresolvable},
		{"extended resource beyond the node", st.Pod("p", "u").Request("example.com/gpu", "3"), &pb.Resources{}, []string{"Insufficient example.com/gpu"}, framework.UnschedulableAndUnresolvable},
		{"ephemeral storage beyond the node", st.Pod("p", "u").Request("ephemeral-storage", "12Gi"), &pb.Resources{}, []string{"Insufficient ephemeral-storage"}, framework.UnschedulableAndUnresolvable},
		{"exactly the node's allocatable is resolvable", st.Pod("p", "u").Req("4", ""), &pb.Resources{MilliCpu: 1000}, []string{"Insufficient cpu"}, framework.Unschedulable},
		{"init container larger than containers", st.Pod("p", "u").Req("1", ""), &pb.Resources{MilliCpu: 2000}, []string{"Insufficient cpu"}, framework.Unschedulable},
	}
	// The last case: an init container asking 3 cores dominates the 1-core container (requests are
	// max(sum(containers), max(init containers))).
	tests[len(tests)-1].pod.Obj().Spec.InitContainers = []*pb.Container{{Name: "init", Resources: &pb.ResourceRequirements{Requests: map[string]string{"cpu": "3"}}}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewFit().Filter(framework.NewCycleState(), tt.pod.Info(), node.InfoRequested(tt.used))
			reasons := append([]string(nil), got.Reasons()...)
			sort.Strings(reasons)
			if diff := cmp.Diff(tt.want, reasons); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			if got.Code() != tt.code {
				t.Errorf("code = %v, want %v", got.Code(), tt.code)
			}
		})
	}
}

func TestFitAllocations(t *testing.T) {
	f := NewFit()
	state := framework.NewCycleState()
	fits := st.Pod("p", "u").Req("1", "1Gi").Info()
	full := st.Pod("q", "v").Req("8", "").Info()
	node := st.Node("n").Capacity("4", "8Gi", 110).Info()
	busy := st.Node("n").Capacity("4", "8Gi", 110).InfoRequested(&pb.Resources{MilliCpu: 3500})
	f.Filter(state, full, node) // warm the status cache (unresolvable)
	f.Filter(state, fits, busy) // and the resolvable one
	if n := testing.AllocsPerRun(100, func() { f.Filter(state, fits, node) }); n != 0 {
		t.Errorf("fitting node: %v allocations per filter", n)
	}
	if n := testing.AllocsPerRun(100, func() { f.Filter(state, full, node) }); n > 1 {
		t.Errorf("too small node: %v allocations per filter", n)
	}
	if n := testing.AllocsPerRun(100, func() { f.Filter(state, fits, busy) }); n > 1 {
		t.Errorf("full node: %v allocations per filter", n)
	}
}
