package nodeready

import "github.com/podbus/podbus/sched/framework"

var _ framework.EnqueueExtensions = &NodeReady{}

// EventsToRegister implements framework.EnqueueExtensions: a node that turns Ready, or a new one.
func (*NodeReady) EventsToRegister() []framework.ClusterEventWithHint {
	return []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add | framework.UpdateNodeCondition}},
	}
}
