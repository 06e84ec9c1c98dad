package nodeaffinity

import "github.com/podbus/podbus/sched/framework"

var _ framework.EnqueueExtensions = &NodeAffinity{}

// EventsToRegister implements framework.EnqueueExtensions: a node whose labels changed, or a new one.
func (*NodeAffinity) EventsToRegister() []framework.ClusterEventWithHint {
	return []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add | framework.UpdateNodeLabel}},
	}
}
