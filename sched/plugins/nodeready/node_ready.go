// Package nodeready filters out nodes whose Ready condition is not True. (Kubernetes does this through
// the node.kubernetes.io/not-ready taint set by the node lifecycle controller; podbus's controller sets
// it too, but only after the condition changed, and schedulers may run without it, so the scheduler
// also reads the condition itself, with the old CheckNodeCondition wording.)
package nodeready

import (
	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "NodeReady"

// ErrReasonNotReady is the filter reason for a node that is not Ready.
const ErrReasonNotReady = "node(s) were not ready"

var statusNotReady = framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonNotReady)

// NodeReady is the plugin.
type NodeReady struct{}

var _ framework.FilterPlugin = &NodeReady{}

// New returns the plugin.
func New() *NodeReady { return &NodeReady{} }

// Name implements framework.Plugin.
func (*NodeReady) Name() string { return Name }

// Filter rejects nodes whose Ready condition is missing, False or Unknown.
func (*NodeReady) Filter(_ *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	if node.Ready {
		return nil
	}
	return statusNotReady
}
