// Package nodeunschedulable filters out cordoned nodes (spec.unschedulable), unless the pod tolerates
// the node.kubernetes.io/unschedulable:NoSchedule taint, as Kubernetes' NodeUnschedulable plugin.
package nodeunschedulable

import (
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "NodeUnschedulable"

// ErrReasonUnschedulable is the filter reason for a cordoned node.
const ErrReasonUnschedulable = "node(s) were unschedulable"

// TaintNodeUnschedulable is the taint a pod tolerates to land on cordoned nodes.
const TaintNodeUnschedulable = "node.kubernetes.io/unschedulable"

var (
	statusUnschedulable = framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonUnschedulable)
	unschedulableTaint  = &pb.Taint{Key: TaintNodeUnschedulable, Effect: framework.TaintEffectNoSchedule}
)

// NodeUnschedulable is the plugin.
type NodeUnschedulable struct{}

var _ framework.FilterPlugin = &NodeUnschedulable{}

// New returns the plugin.
func New() *NodeUnschedulable { return &NodeUnschedulable{} }

// Name implements framework.Plugin.
func (*NodeUnschedulable) Name() string { return Name }

// Filter rejects unschedulable nodes for pods that do not tolerate it.
func (*NodeUnschedulable) Filter(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if !node.Unschedulable {
		return nil
	}
	if framework.TolerationsTolerateTaint(pod.Pod.GetSpec().GetTolerations(), unschedulableTaint) {
		return nil
	}
	return statusUnschedulable
}
