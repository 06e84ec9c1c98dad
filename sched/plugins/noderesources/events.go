package noderesources

import "github.com/podbus/podbus/sched/framework"

var _ framework.EnqueueExtensions = &Fit{}

// EventsToRegister implements framework.EnqueueExtensions: room freed by a pod leaving (or a
// nomination dropped), a node with more allocatable, or a new one.
func (*Fit) EventsToRegister() []framework.ClusterEventWithHint {
	return []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Delete}},
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add | framework.UpdateNodeAllocatable}},
	}
}
