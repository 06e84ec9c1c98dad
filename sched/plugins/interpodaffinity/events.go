package interpodaffinity

import "github.com/podbus/podbus/sched/framework"

var _ framework.EnqueueExtensions = &InterPodAffinity{}

// EventsToRegister implements framework.EnqueueExtensions: a pod leaving (anti-affinity), a node
// relabelled or added, and a pod placed, but only for a pod waiting for pod affinity (anti-affinity
// only gets harder with more pods).
func (*InterPodAffinity) EventsToRegister() []framework.ClusterEventWithHint {
	return []framework.ClusterEventWithHint{
		{Event: framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Delete}},
		{Event: framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Add}, QueueingHint: waitsForAffinity},
		{Event: framework.ClusterEvent{Resource: framework.Node, ActionType: framework.Add | framework.UpdateNodeLabel}},
	}
}

func waitsForAffinity(_ framework.ClusterEvent, reasons map[string]int32) bool {
	return reasons[ErrReasonAffinityRulesNotMatch] > 0
}
