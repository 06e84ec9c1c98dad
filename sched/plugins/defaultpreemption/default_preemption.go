// Package defaultpreemption is kube-scheduler's DefaultPreemption PostFilter: when a pod fits no node,
// find the node where evicting the fewest, least important lower-priority pods makes it fit.
//
//	eligible? (preemptionPolicy Never, or victims of an earlier preemption still going: no)
//	  └─▶ per node the filters rejected as Unschedulable (not UnschedulableAndUnresolvable):
//	        remove every lower-priority pod ─▶ still no fit: not a candidate
//	        re-add them, most important first, keeping each that still lets the pod fit ("reprieve")
//	        what could not be re-added are the node's victims
//	  └─▶ pick the candidate: lowest highest-victim priority, smallest priority sum, fewest victims,
//	      latest start among the highest-priority victims, then the first in name order
//
// The plugin only proposes; the scheduler publishes the nomination and the binder carries it out.
// Pods of equal or higher priority are never victims. PodDisruptionBudgets do not exist in podbus, so
// kube's first criterion (fewest PDB violations) is always a tie and left out. A pod's start time is
// its creation time (the alloc record does not carry status.startTime). Candidates are the node's
// PlacedPods from its alloc record; pods this replica only assumed are never victims (the binder could
// not mark them). Each node is evaluated on a clone of the cycle state that the PreFilter extensions
// (InterPodAffinity, PodTopologySpread) update as victims leave and are reprieved, so their
// cluster-wide counts match the node view being filtered.
package defaultpreemption

import (
	"math"
	"sort"
	"strings"

	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "DefaultPreemption"

// Reasons and messages, worded as kube-scheduler's.
const (
	ErrReasonNotHelpful = "Preemption is not helpful for scheduling"
	ErrReasonNoVictims  = "No preemption victims found for incoming pod"
	MsgPolicyNever      = "preemption: not eligible due to preemptionPolicy=Never"
	MsgVictimsPending   = "preemption: not eligible due to a terminating pod on the nominated node"
	// PreemptNever is the preemptionPolicy that forbids a pod to preempt.
	PreemptNever = "Never"
)

var statusNoVictims = framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonNoVictims)

// Plugin is the DefaultPreemption PostFilter.
type Plugin struct{}

// New returns the plugin.
func New() *Plugin { return &Plugin{} }

// Name of the plugin.
func (*Plugin) Name() string { return Name }

var _ framework.PostFilterPlugin = (*Plugin)(nil)

// PostFilter nominates a node and its victims, or says why preemption cannot help.
func (pl *Plugin) PostFilter(state *framework.CycleState, pod *framework.PodInfo, in framework.PostFilterInput) (*framework.PostFilterResult, *framework.Status) {
	if ok, msg := eligible(pod, in); !ok {
		return waitingResult(pod, in.Snapshot, msg)
	}
	var cands []candidate
	statuses := make(map[string]int32, 2)
	for _, r := range in.Rejected {
		if r.Status.Code() == framework.UnschedulableAndUnresolvable {
			statuses[ErrReasonNotHelpful]++
			continue
		}
		victims, st := SelectVictimsOnNode(state, pod, r.Node.WithNominated(pod), in)
		if !st.IsSuccess() {
			if err := st.AsError(); err != nil {
				return nil, st
			}
			for _, reason := range st.Reasons() {
				statuses[reason]++
			}
			continue
		}
		if len(victims) == 0 {
			// The pod fits there now: the snapshot changed under the cycle (it cannot, but be safe).
			continue
		}
		cands = append(cands, candidate{node: r.Node.Name(), victims: victims})
	}
	if len(cands) == 0 {
		fe := &framework.FitError{NumAllNodes: len(in.Rejected), Reasons: statuses}
		return nil, framework.NewStatus(framework.Unschedulable, "preemption: "+strings.TrimSuffix(fe.Error(), "."))
	}
	best := pickOneNode(cands)
	return &framework.PostFilterResult{NominatedNode: best.node, Victims: best.victims}, nil
}

// waitingResult: not eligible. A pod still waiting for its victims keeps its nominated node.
func waitingResult(pod *framework.PodInfo, snap *framework.Snapshot, msg string) (*framework.PostFilterResult, *framework.Status) {
	st := framework.NewStatus(framework.Unschedulable, msg)
	if msg != MsgVictimsPending {
		return nil, st
	}
	if n := NominatedNode(snap, pod.UID()); n != nil {
		return &framework.PostFilterResult{NominatedNode: n.Name()}, st
	}
	return nil, st
}

// eligible is kube's PodEligibleToPreemptOthers: never with preemptionPolicy Never, and not while pods
// this pod already preempted on its nominated node are still there (unless that node became useless).
func eligible(pod *framework.PodInfo, in framework.PostFilterInput) (bool, string) {
	if pod.Pod.GetSpec().GetPreemptionPolicy() == PreemptNever {
		return false, MsgPolicyNever
	}
	n := NominatedNode(in.Snapshot, pod.UID())
	if n == nil {
		return true, ""
	}
	for _, r := range in.Rejected {
		if r.Node.Name() == n.Name() && r.Status.Code() == framework.UnschedulableAndUnresolvable {
			return true, ""
		}
	}
	uid := pod.UID()
	for _, p := range n.Pods {
		if p.PreemptedBy == uid {
			return false, MsgVictimsPending
		}
	}
	return true, ""
}

// NominatedNode returns the node pod uid is nominated to (by an earlier preemption), or nil.
func NominatedNode(snap *framework.Snapshot, uid string) *framework.NodeInfo {
	for _, n := range snap.Nodes() {
		for _, p := range n.Nominated {
			if p.UID == uid {
				return n
			}
		}
	}
	return nil
}

// SelectVictimsOnNode is kube's selectVictimsOnNode: the fewest, least important lower-priority pods of
// node whose removal lets pod pass in.Filter. The victims come most important first. A rejection says
// why no set of victims helps. state is not changed (a clone is).
func SelectVictimsOnNode(state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo, in framework.PostFilterInput) ([]*framework.PlacedPod, *framework.Status) {
	prio := framework.PodPriority(pod.Pod)
	var potential []*framework.PlacedPod
	for _, p := range node.Pods {
		if p.Priority < prio && !p.Assumed() {
			potential = append(potential, p)
		}
	}
	if len(potential) == 0 {
		return nil, statusNoVictims
	}
	sort.Slice(potential, func(i, j int) bool { return moreImportant(potential[i], potential[j]) })
	uids := make([]string, len(potential))
	for i, v := range potential {
		uids[i] = v.UID
	}
	cur := node.WithoutPods(uids...)
	st := state.Clone()
	for _, v := range potential {
		if s := in.RemovePod(st, v, node); !s.IsSuccess() {
			return nil, s
		}
	}
	if s := in.Filter(st, cur); !s.IsSuccess() {
		return nil, s
	}
	var victims []*framework.PlacedPod
	for _, v := range potential {
		with := cur.WithPod(v)
		if s := in.AddPod(st, v, with); !s.IsSuccess() {
			return nil, s
		}
		s := in.Filter(st, with)
		switch {
		case s.IsSuccess():
			cur = with // reprieved
		case s.Code() == framework.Error:
			return nil, s
		default:
			if s := in.RemovePod(st, v, with); !s.IsSuccess() {
				return nil, s
			}
			victims = append(victims, v)
		}
	}
	return victims, nil
}

// moreImportant is kube's MoreImportantPod: higher priority, then the one that started earlier
// (creation time here), then the uid so that the order is total.
func moreImportant(a, b *framework.PlacedPod) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	ta, tb := a.CreationTimestamp, b.CreationTimestamp
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return a.UID < b.UID
}

type candidate struct {
	node    string
	victims []*framework.PlacedPod // most important first
}

// pickOneNode is kube's pickOneNodeForPreemption without the PDB criterion; candidates come in node
// name order and the first survivor of all criteria wins.
func pickOneNode(cands []candidate) candidate {
	criteria := []func(candidate) int64{
		// lowest highest-priority victim (victims[0] is the most important)
		func(c candidate) int64 { return -int64(c.victims[0].Priority) },
		// smallest sum of priorities, each shifted to be positive as kube does
		func(c candidate) int64 {
			var sum int64
			for _, v := range c.victims {
				sum += int64(v.Priority) + int64(math.MaxInt32) + 1
			}
			return -sum
		},
		// fewest victims
		func(c candidate) int64 { return -int64(len(c.victims)) },
		// latest start among the highest-priority victims
		func(c candidate) int64 { return earliestStartOfHighest(c.victims) },
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].node < cands[j].node })
	for _, score := range criteria {
		if len(cands) == 1 {
			break
		}
		best := int64(math.MinInt64)
		var keep []candidate
		for _, c := range cands {
			switch s := score(c); {
			case s > best:
				best, keep = s, append(keep[:0], c)
			case s == best:
				keep = append(keep, c)
			}
		}
		cands = keep
	}
	return cands[0]
}

// earliestStartOfHighest is the earliest start (UnixNano) among the victims of the highest priority.
func earliestStartOfHighest(victims []*framework.PlacedPod) int64 {
	top := victims[0].Priority
	earliest := int64(math.MaxInt64)
	for _, v := range victims {
		if v.Priority != top {
			continue
		}
		earliest = min(earliest, v.CreationTimestamp.UnixNano())
	}
	return earliest
}
