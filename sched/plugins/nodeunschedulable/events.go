package nodeunschedulable

import "github.com/podbus/podbus/sched/framework"

var _ framework.EnqueueExtensions = &NodeUnschedulable{}

// EventsToRegister implements framework.EnqueueExtensions: an uncordoned node (a taint change, as in
// Kubernetes), or a new one.
func (*NodeUnschedulable) EventsToRegister() []framework.ClusterEventWithHint {
	return []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add | framework.UpdateNodeTaint}},
	}
}
