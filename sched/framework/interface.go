// Package framework is the scheduler's plugin framework, a small cut of kube-scheduler's: tiny
// extension-point interfaces, a status whose code keeps "unschedulable" apart from "internal error",
// a per-cycle state, and an immutable node snapshot that plugins read.
//
// One scheduling cycle runs the extension points in this order (see sched/core/schedule_one.go):
//
//	PreFilter (once per pod: compute, stash in CycleState, maybe Skip own Filter)
//	   └─▶ Filter (per node, first failure wins; reasons are counted per node)
//	          ├─▶ PreScore (once, with the feasible nodes; maybe Skip own Score)
//	          │      └─▶ Score (per feasible node) ─▶ NormalizeScore (per plugin, to 0..MaxNodeScore) ─▶ × weight, sum
//	          │             └─▶ (best node, assumed in the cache) ─▶ Reserve ──fails or decision lost──▶ Unreserve
//	          └─▶ no node fits: PostFilter (preemption: nominate a node and the pods to evict there; it filters
//	                 node views without victims on a copy of the CycleState that PreFilter
//	                 extensions (AddPod/RemovePod) keep in step)
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

// PreFilterExtensions is a PreFilter whose state depends on the pods of other nodes (inter-pod
// affinity, topology spread). AddPod and RemovePod update that state (in a CycleState clone) as if
// placed were added to or removed from node, so that preemption can filter node views without
// victims without re-running PreFilter over the whole snapshot (kube-scheduler's PreFilterExtensions).
// They are not called in a cycle where the plugin's PreFilter returned Skip.
type PreFilterExtensions interface {
	PreFilterPlugin
	AddPod(state *CycleState, pod *PodInfo, placed *PlacedPod, node *NodeInfo) *Status
	RemovePod(state *CycleState, pod *PodInfo, placed *PlacedPod, node *NodeInfo) *Status
}

// FilterPlugin decides whether the pod may run on one node. nil (or Success) means it may.
type FilterPlugin interface {
	Plugin
	Filter(state *CycleState, pod *PodInfo, node *NodeInfo) *Status
}

// CandidatePlugin is a FilterPlugin that can tell, after its PreFilter, the only nodes its Filter may
// pass: the snapshot positions (see Snapshot.NodeAt) in ascending order, ok=false when it cannot narrow
// the nodes down. Every node left out must fail its Filter; exact says every node named passes it too,
// so the scheduler need not run it on them. Callers must not modify positions (it may be the
// snapshot's own topology index).
type CandidatePlugin interface {
	FilterPlugin
	CandidateNodes(state *CycleState, pod *PodInfo) (positions []int32, exact, ok bool)
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
	// NodeInfo without some pods (NodeInfo.WithoutPods), with state: a CycleState.Clone kept in step
	// with the view through AddPod and RemovePod.
	Filter func(state *CycleState, node *NodeInfo) *Status
	// AddPod and RemovePod run the PreFilter extensions for placed added to / removed from node.
	AddPod, RemovePod func(state *CycleState, placed *PlacedPod, node *NodeInfo) *Status
}

// NodeStatus is one node's filter verdict.
type NodeStatus struct {
	Node   *NodeInfo
	Status *Status
}

// PostFilterResult nominates a node and lists the pods to evict there.
type PostFilterResult struct {
	NominatedNode string
	// Victims are pods of the node's alloc record (never assumed ones), most important first.
	Victims []*PlacedPod
}

// GetNominatedNode is nil-safe.
func (r *PostFilterResult) GetNominatedNode() string {
	if r == nil {
		return ""
	}
	return r.NominatedNode
}

// GetVictims is nil-safe.
func (r *PostFilterResult) GetVictims() []*PlacedPod {
	if r == nil {
		return nil
	}
	return r.Victims
}
