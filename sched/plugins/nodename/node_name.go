// Package nodename keeps a pod that names its node (spec.nodeName) to that node only.
package nodename

import (
	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "NodeName"

// ErrReason is the filter reason for every other node.
const ErrReason = "node(s) didn't match the requested node name"

var (
	statusMismatch = framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReason)
	statusSkip     = framework.NewStatus(framework.Skip)
)

// NodeName is the plugin.
type NodeName struct{}

var (
	_ framework.PreFilterPlugin = &NodeName{}
	_ framework.FilterPlugin    = &NodeName{}
)

// New returns the plugin.
func New() *NodeName { return &NodeName{} }

// Name implements framework.Plugin.
func (*NodeName) Name() string { return Name }

// PreFilter skips the filter for the usual pod, which names no node.
func (*NodeName) PreFilter(_ *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	if pod.Pod.GetSpec().GetNodeName() == "" {
		return statusSkip
	}
	return nil
}

// Filter rejects every node but the named one.
func (*NodeName) Filter(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	want := pod.Pod.GetSpec().GetNodeName()
	if want == "" || want == node.Name() {
		return nil
	}
	return statusMismatch
}
