package podtopologyspread

import "github.com/podbus/podbus/sched/framework"

var _ framework.EnqueueExtensions = &PodTopologySpread{}

// EventsToRegister implements framework.EnqueueExtensions: a pod leaving (the skew drops), a node
// relabelled or added (new domains), and a pod placed, but only for a pod rejected for the skew (it
// may raise the minimum elsewhere; a node missing the topology label gains nothing by it).
func (*PodTopologySpread) EventsToRegister() []framework.ClusterEventWithHint {
	return []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Delete}},
		{Event: framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Add}, QueueingHint: rejectedForSkew},
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add | framework.UpdateNodeLabel}},
	}
}

func rejectedForSkew(_ framework.ClusterEvent, reasons map[string]int32) bool {
	return reasons[ErrReasonConstraintsNotMatch] > 0
}
