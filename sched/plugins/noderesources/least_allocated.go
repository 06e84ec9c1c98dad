package noderesources

import (
	"github.com/podbus/podbus/sched/framework"
)

// LeastAllocatedName is the name of the score plugin.
const LeastAllocatedName = "NodeResourcesLeastAllocated"

// LeastAllocated scores nodes by the share of cpu and memory left after placing the pod, as
// kube-scheduler v1.37's NodeResourcesFit with the LeastAllocated strategy and its default weights
// (cpu=1, memory=1; pkg/scheduler/framework/plugins/noderesources/least_allocated.go):
//
//	score = mean over resources with allocatable > 0 of (allocatable - requested) * 100 / allocatable
//
// in integer arithmetic (each term and the mean truncated), where requested counts a pod without a
// cpu or memory request at 100m / 200Mi, this pod included, and a request beyond allocatable scores
// 0. Kube applies those defaults per container; podbus per pod, as the alloc record keeps pod totals.
type LeastAllocated struct{}

var _ framework.ScorePlugin = &LeastAllocated{}

// NewLeastAllocated returns the score plugin.
func NewLeastAllocated() *LeastAllocated { return &LeastAllocated{} }

// Name implements framework.Plugin.
func (*LeastAllocated) Name() string { return LeastAllocatedName }

// Score implements framework.ScorePlugin.
func (*LeastAllocated) Score(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	var sum, n int64
	if a := node.Allocatable.MilliCPU; a > 0 {
		sum += LeastRequestedScore(node.NonZeroMilliCPU+pod.NonZeroMilliCPU, a)
		n++
	}
	if a := node.Allocatable.Memory; a > 0 {
		sum += LeastRequestedScore(node.NonZeroMemory+pod.NonZeroMemory, a)
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return sum / n, nil
}

// LeastRequestedScore is one resource's term: the share of capacity left, 0 beyond it.
func LeastRequestedScore(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * framework.MaxNodeScore / capacity
}
