// Package balancedallocation implements Kubernetes' NodeResourcesBalancedAllocation score: prefer nodes
// whose cpu and memory shares become more equal when the pod is placed there. As kube-scheduler v1.37
// (pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go), the score rates the change
// in the node's balance, not the balance reached:
//
//	fraction_r  = min(requested_r / allocatable_r, 1)   (requests as declared, no scoring defaults)
//	balance     = int((1 − std(fractions)) × 100),     std = |f_cpu − f_mem| / 2 for two resources
//	score       = 50 + (50 + balance(with pod) − balance(without pod)) / 2   (integer division)
//
// Each balance lies in 50..100, so the score does too: 75 when the pod leaves the balance as it was,
// up to 100 when it evens out a lopsided node, down to 50 when it tips an even one. A resource the
// node does not declare is left out (one resource left: std 0). A pod that requests neither cpu nor
// memory (best effort) is not scored by this plugin (its PreScore skips), so such pods are not all
// drawn to the same node.
package balancedallocation

import (
	"math"

	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin (kube-scheduler's).
const Name = "NodeResourcesBalancedAllocation"

var statusSkip = framework.NewStatus(framework.Skip)

// BalancedAllocation is the plugin.
type BalancedAllocation struct{}

var (
	_ framework.PreScorePlugin = &BalancedAllocation{}
	_ framework.ScorePlugin    = &BalancedAllocation{}
)

// New returns the plugin.
func New() *BalancedAllocation { return &BalancedAllocation{} }

// Name implements framework.Plugin.
func (*BalancedAllocation) Name() string { return Name }

// PreScore skips best-effort pods.
func (*BalancedAllocation) PreScore(_ *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	if pod.Request.MilliCPU == 0 && pod.Request.Memory == 0 {
		return statusSkip
	}
	return nil
}

// Score implements framework.ScorePlugin.
func (*BalancedAllocation) Score(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	used := &node.Requested
	with := balance(used.MilliCPU+pod.Request.MilliCPU, used.Memory+pod.Request.Memory, &node.Allocatable)
	without := balance(used.MilliCPU, used.Memory, &node.Allocatable)
	const half = framework.MaxNodeScore / 2
	return half + (half+with-without)/2, nil
}

// balance is how evenly cpu and memory are used, 50..100: (1 − std) × 100, truncated.
func balance(milliCPU, memory int64, alloc *framework.Resource) int64 {
	if alloc.MilliCPU == 0 || alloc.Memory == 0 {
		return framework.MaxNodeScore // at most one resource: std 0
	}
	fCPU := min(float64(milliCPU)/float64(alloc.MilliCPU), 1)
	fMem := min(float64(memory)/float64(alloc.Memory), 1)
	std := math.Abs((fCPU - fMem) / 2)
	return int64((1 - std) * float64(framework.MaxNodeScore))
}
