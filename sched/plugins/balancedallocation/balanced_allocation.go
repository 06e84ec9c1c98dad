// Package balancedallocation implements Kubernetes' NodeResourcesBalancedAllocation score: prefer nodes
// whose cpu and memory would be used in equal shares once the pod is placed,
//
//	fraction_r = min(requested_r / allocatable_r, 1)   (requests as declared, this pod included)
//	score      = (1 − std(fractions)) × 100,  std = |f_cpu − f_mem| / 2 for the two resources
//
// A resource the node does not declare is left out (one resource left: std 0). As in kube-scheduler
// since v1.33, a pod that requests neither cpu nor memory (best effort) is not scored by this plugin
// (its PreScore skips), so such pods are not all drawn to the same already balanced node.
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
	cpuAlloc, memAlloc := node.Allocatable.MilliCPU, node.Allocatable.Memory
	if cpuAlloc == 0 || memAlloc == 0 {
		return framework.MaxNodeScore, nil // at most one resource: std 0
	}
	fCPU := min(float64(node.Requested.MilliCPU+pod.Request.MilliCPU)/float64(cpuAlloc), 1)
	fMem := min(float64(node.Requested.Memory+pod.Request.Memory)/float64(memAlloc), 1)
	std := math.Abs((fCPU - fMem) / 2)
	return int64((1 - std) * float64(framework.MaxNodeScore)), nil
}
