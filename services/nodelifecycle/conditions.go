package nodelifecycle

import (
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// Taints by condition (kube's TaintNodesByCondition): a node under pressure, or without its pod
// network, gets a NoSchedule taint so that new pods go elsewhere; the pods it runs stay (the agent
// evicts under pressure itself).
var conditionTaints = []struct{ condition, key string }{
	{"MemoryPressure", "node.kubernetes.io/memory-pressure"},
	{"DiskPressure", "node.kubernetes.io/disk-pressure"},
	{"PIDPressure", "node.kubernetes.io/pid-pressure"},
	{"NetworkUnavailable", "node.kubernetes.io/network-unavailable"},
}

// isConditionTaint reports whether t is one of the condition taints this controller owns.
func isConditionTaint(t *pb.Taint) bool {
	if t.GetEffect() != framework.TaintEffectNoSchedule {
		return false
	}
	for _, ct := range conditionTaints {
		if t.GetKey() == ct.key {
			return true
		}
	}
	return false
}

// wantedConditionTaints are the condition taint keys n should carry: those whose condition is True.
func wantedConditionTaints(n *pb.Node) map[string]bool {
	out := map[string]bool{}
	for _, ct := range conditionTaints {
		if c := podutil.NodeCondition(n, ct.condition); c != nil && c.GetStatus() == podutil.True {
			out[ct.key] = true
		}
	}
	return out
}
