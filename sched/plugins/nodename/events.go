package nodename

import "github.com/podbus/podbus/sched/framework"

var _ framework.EnqueueExtensions = &NodeName{}

// EventsToRegister implements framework.EnqueueExtensions: the named node may appear.
func (*NodeName) EventsToRegister() []framework.ClusterEventWithHint {
	return []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add}},
	}
}
