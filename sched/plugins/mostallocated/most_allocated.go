// Package mostallocated is the MostAllocated score plugin, as Kubernetes' NodeResourcesFit with the
// MostAllocated strategy: prefer the fullest node that fits, to pack pods onto few nodes (the opposite
// of the default NodeResourcesLeastAllocated, which spreads them).
package mostallocated

import (
	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "NodeResourcesMostAllocated"

// MostAllocated scores a node by the share of cpu and memory used once the pod is placed, as
// kube-scheduler v1.37 with its default weights (cpu=1, memory=1;
// pkg/scheduler/framework/plugins/noderesources/most_allocated.go):
//
//	score = mean over resources with allocatable > 0 of min(requested, allocatable) * 100 / allocatable
//
// in integer arithmetic (each term and the mean truncated), where requested counts a pod without a
// cpu or memory request at 100m / 200Mi, this pod included. Kube applies those defaults per
// container; podbus per pod, as the alloc record keeps pod totals.
type MostAllocated struct{}

var _ framework.ScorePlugin = &MostAllocated{}

// New returns the plugin.
func New() *MostAllocated { return &MostAllocated{} }

// Name implements framework.Plugin.
func (*MostAllocated) Name() string { return Name }

// Score implements framework.ScorePlugin.
func (*MostAllocated) Score(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	var sum, n int64
	if a := node.Allocatable.MilliCPU; a > 0 {
		sum += MostRequestedScore(node.NonZeroMilliCPU+pod.NonZeroMilliCPU, a)
		n++
	}
	if a := node.Allocatable.Memory; a > 0 {
		sum += MostRequestedScore(node.NonZeroMemory+pod.NonZeroMemory, a)
		n++
	}
	if n == 0 {
		return 0, nil
	}
	return sum / n, nil
}

// MostRequestedScore is one resource's term, as Kubernetes': more than the capacity (possible with the non-zero defaults)
// counts as full.
func MostRequestedScore(requested, capacity int64) int64 {
	if capacity == 0 {
		return 0
	}
	return min(requested, capacity) * framework.MaxNodeScore / capacity
}
