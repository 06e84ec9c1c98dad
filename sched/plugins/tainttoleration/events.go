package tainttoleration

import "github.com/podbus/podbus/sched/framework"

var _ framework.EnqueueExtensions = &TaintToleration{}

// EventsToRegister implements framework.EnqueueExtensions: a node whose taints changed, or a new one.
func (*TaintToleration) EventsToRegister() []framework.ClusterEventWithHint {
	return []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add | framework.UpdateNodeTaint}},
	}
}
