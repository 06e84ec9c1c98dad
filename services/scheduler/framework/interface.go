// Package framework is the scheduler's plugin framework, a small cut of kube-scheduler's: tiny
// extension-point interfaces, a status whose code keeps "unschedulable" apart from "internal error",
// a per-cycle state, and an immutable node snapshot that plugins read.
//
// One scheduling cycle runs the extension points in this order (see services/scheduler/schedule_one.go):
//
//	PreFilter (once per pod: compute, stash in CycleState, maybe Skip own Filter)
//	   └─▶ Filter (per node, first failure wins; reasons are counted per node)
//	          ├─▶ Score (per feasible node) ─▶ NormalizeScore (per plugin, to 0..MaxNodeScore) ─▶ × weight, sum
//	          └─▶ no node fits: PostFilter (preemption: nominate a node and the pods to evict there)
//
// Plugins are pure functions of (CycleState, PodInfo, NodeInfo): they never touch the bus or the store.
package framework

import pb "github.com/podbus/podbus/proto/podbusv1"

// MaxNodeScore is the highest score a Score plugin may give after normalisation (as in Kubernetes).
const MaxNodeScore int64 = 100

// Plugin is what every plugin is: a name, unique within a framework.
type Plugin interface {
	Name() string
}

// PreFilterPlugin runs once per pod before any node is filtered. It computes what Filter and Score
// need and stores it in the CycleState. Returning a Skip status skips the plugin's own Filter for this
// cycle (the pod asks nothing of it); an unschedulable status rejects the pod on every node.
type PreFilterPlugin interface {
	Plugin
	PreFilter(state *CycleState, pod *PodInfo) *Status
}

// FilterPlugin decides whether the pod may run on one node. nil (or Success) means it may.
type FilterPlugin interface {
	Plugin
	Filter(state *CycleState, pod *PodInfo, node *NodeInfo) *Status
}

// ScorePlugin ranks a node that passed every filter. Without a NormalizeScorePlugin the score must
// already be within [0, MaxNodeScore].
type ScorePlugin interface {
	Plugin
	Score(state *CycleState, pod *PodInfo, node *NodeInfo) (int64, *Status)
}

// NormalizeScorePlugin rescales one Score plugin's raw scores of all feasible nodes to [0, MaxNodeScore].
type NormalizeScorePlugin interface {
	Plugin
	NormalizeScore(state *CycleState, pod *PodInfo, scores []NodeScore) *Status
}

// NodeScore is one node's score from one plugin (or the weighted total).
type NodeScore struct {
	Node  *NodeInfo
	Score int64
}

// PostFilterPlugin runs only when the pod fits no node (kube-scheduler's PostFilter; the preemption
// plugin). It may nominate a node where the pod would fit once the returned victims are gone. A
// rejection's message is appended to the pod's FitError message.
type PostFilterPlugin interface {
	Plugin
	PostFilter(state *CycleState, pod *PodInfo, in PostFilterInput) (*PostFilterResult, *Status)
}

// PostFilterInput is what a PostFilter sees of the failed cycle.
type PostFilterInput struct {
	Snapshot *Snapshot
	// Rejected holds every node the filters rejected, with the status that rejected it. Nodes rejected
	// UnschedulableAndUnresolvable cannot be helped by removing pods.
	Rejected []NodeStatus
	// Filter runs this cycle's filter plugins (with the PreFilter's skips) on a node view, e.g. a
	// NodeInfo without some pods (NodeInfo.WithoutPods).
	Filter func(node *NodeInfo) *Status
}

// NodeStatus is one node's filter verdict.
type NodeStatus struct {
	Node   *NodeInfo
	Status *Status
}

// PostFilterResult nominates a node and lists the pods to evict there.
type PostFilterResult struct {
	NominatedNode string
	Victims       []Victim
}

// GetNominatedNode is nil-safe.
func (r *PostFilterResult) GetNominatedNode() string {
	if r == nil {
		return ""
	}
	return r.NominatedNode
}

// GetVictims is nil-safe.
func (r *PostFilterResult) GetVictims() []Victim {
	if r == nil {
		return nil
	}
	return r.Victims
}

// Victim is a pod to evict, as the node's alloc record lists it.
type Victim struct {
	UID string
	Pod *pb.PodAllocation
}
