// Package framework is the scheduler's plugin framework, a small cut of kube-scheduler's: tiny
// extension-point interfaces, a status whose code keeps "unschedulable" apart from "internal error",
// a per-cycle state, and an immutable node snapshot that plugins read.
//
// One scheduling cycle runs the extension points in this order (see services/scheduler/schedule_one.go):
//
//	PreFilter (once per pod: compute, stash in CycleState, maybe Skip own Filter)
//	   └─▶ Filter (per node, first failure wins; reasons are counted per node)
//	          └─▶ PreScore (once, with the feasible nodes; maybe Skip own Score)
//	                 └─▶ Score (per feasible node) ─▶ NormalizeScore (per plugin, to 0..MaxNodeScore) ─▶ × weight, sum
//	                        └─▶ (best node, assumed in the cache) ─▶ Reserve ──fails or decision lost──▶ Unreserve
//
// Plugins are pure functions of (CycleState, PodInfo, NodeInfo): they never touch the bus or the store.
package framework

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

// PreScorePlugin runs once per pod with the nodes that passed every filter, before any Score. It
// computes what Score needs (over the whole snapshot if it must). Returning Skip skips the plugin's own
// Score for this cycle (every node scores 0 for it).
type PreScorePlugin interface {
	Plugin
	PreScore(state *CycleState, pod *PodInfo, nodes []*NodeInfo) *Status
}

// ReservePlugin is told when the pod was assumed on a node (Reserve) and when that assumption is undone
// (Unreserve: Reserve of this or a later plugin failed, or the decision could not be published).
// Unreserve must be idempotent and must not fail.
type ReservePlugin interface {
	Plugin
	Reserve(state *CycleState, pod *PodInfo, nodeName string) *Status
	Unreserve(state *CycleState, pod *PodInfo, nodeName string)
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
