package framework

import (
	"errors"
	"fmt"
)

// ErrConfig is returned by New for a plugin set that cannot work.
var ErrConfig = errors.New("invalid framework config")

// Registration enables a plugin. Weight multiplies its normalised score (score plugins only; 0 means 1).
// Disabled lists extension points the plugin implements but must not run at (a profile disabled them):
// a disabled Filter takes its PreFilter along, a disabled Score its PreScore, since their state would
// serve nothing.
type Registration struct {
	Plugin   Plugin
	Weight   int64
	Disabled ExtensionPoint
}

// ExtensionPoint is a set of extension points (a bit mask).
type ExtensionPoint uint16

// Extension points a registration can disable.
const (
	PreFilterPoint ExtensionPoint = 1 << iota
	FilterPoint
	PostFilterPoint
	PreScorePoint
	ScorePoint
	ReservePoint
)

// Points returns the extension points p implements.
func Points(p Plugin) ExtensionPoint {
	var e ExtensionPoint
	if _, ok := p.(PreFilterPlugin); ok {
		e |= PreFilterPoint
	}
	if _, ok := p.(FilterPlugin); ok {
		e |= FilterPoint
	}
	if _, ok := p.(PostFilterPlugin); ok {
		e |= PostFilterPoint
	}
	if _, ok := p.(PreScorePlugin); ok {
		e |= PreScorePoint
	}
	if _, ok := p.(ScorePlugin); ok {
		e |= ScorePoint
	}
	if _, ok := p.(ReservePlugin); ok {
		e |= ReservePoint
	}
	return e
}

// Enabled returns the extension points r runs at.
func (r Registration) Enabled() ExtensionPoint {
	off := r.Disabled
	if off&FilterPoint != 0 {
		off |= PreFilterPoint
	}
	if off&ScorePoint != 0 {
		off |= PreScorePoint
	}
	return Points(r.Plugin) &^ off
}

// Framework runs the enabled plugins at each extension point, in registration order.
type Framework struct {
	preFilters []PreFilterPlugin
	filters    []FilterPlugin
	// skipIndex maps a PreFilter plugin to its Filter's index (or -1), so a Skip costs one bool per cycle.
	skipIndex   []int
	postFilters []PostFilterPlugin
	// preFilterExts are the indexes of the PreFilters that implement PreFilterExtensions.
	preFilterExts []int
	scores        []ScorePlugin
	normalizers   []NormalizeScorePlugin // parallel to scores; nil when the plugin does not normalise
	weights       []int64
	preScores     []PreScorePlugin
	// preScoreIndex maps a PreScore plugin to its Score's index (or -1), as skipIndex.
	preScoreIndex []int
	reserves      []ReservePlugin
	// events are the registrations of the plugins that reject pods and implement EnqueueExtensions.
	events map[string][]ClusterEventWithHint
}

// New checks the registrations and sorts the plugins into extension points.
func New(regs ...Registration) (*Framework, error) {
	f := &Framework{}
	seen := map[string]bool{}
	for _, r := range regs {
		if r.Plugin == nil {
			return nil, fmt.Errorf("%w: nil plugin", ErrConfig)
		}
		name := r.Plugin.Name()
		if seen[name] {
			return nil, fmt.Errorf("%w: plugin %q registered twice", ErrConfig, name)
		}
		seen[name] = true
		if r.Weight < 0 {
			return nil, fmt.Errorf("%w: plugin %q has negative weight %d", ErrConfig, name, r.Weight)
		}
		on := r.Enabled()
		if r.Disabled&^Points(r.Plugin) != 0 {
			return nil, fmt.Errorf("%w: plugin %q: cannot disable an extension point it does not implement", ErrConfig, name)
		}
		// A PreFilter computes the state its Filter reads (and a PreScore its Score's): the second
		// cannot run alone.
		if on&FilterPoint != 0 && Points(r.Plugin)&PreFilterPoint != 0 && on&PreFilterPoint == 0 {
			return nil, fmt.Errorf("%w: plugin %q: its filter needs its preFilter", ErrConfig, name)
		}
		if on&ScorePoint != 0 && Points(r.Plugin)&PreScorePoint != 0 && on&PreScorePoint == 0 {
			return nil, fmt.Errorf("%w: plugin %q: its score needs its preScore", ErrConfig, name)
		}
		used := on != 0
		if on&PreFilterPoint != 0 {
			f.preFilters = append(f.preFilters, r.Plugin.(PreFilterPlugin))
		}
		if on&FilterPoint != 0 {
			f.filters = append(f.filters, r.Plugin.(FilterPlugin))
		}
		if on&PostFilterPoint != 0 {
			f.postFilters = append(f.postFilters, r.Plugin.(PostFilterPlugin))
		}
		if on&PreScorePoint != 0 {
			f.preScores = append(f.preScores, r.Plugin.(PreScorePlugin))
		}
		if on&ReservePoint != 0 {
			f.reserves = append(f.reserves, r.Plugin.(ReservePlugin))
		}
		if on&ScorePoint != 0 {
			w := r.Weight
			if w == 0 {
				w = 1
			}
			n, _ := r.Plugin.(NormalizeScorePlugin)
			f.scores = append(f.scores, r.Plugin.(ScorePlugin))
			f.normalizers = append(f.normalizers, n)
			f.weights = append(f.weights, w)
		}
		if ee, ok := r.Plugin.(EnqueueExtensions); ok && on&(PreFilterPoint|FilterPoint) != 0 {
			if f.events == nil {
				f.events = map[string][]ClusterEventWithHint{}
			}
			f.events[name] = ee.EventsToRegister()
		}
		if !used {
			return nil, fmt.Errorf("%w: plugin %q runs at no extension point", ErrConfig, name)
		}
	}
	f.skipIndex = make([]int, len(f.preFilters))
	for i, p := range f.preFilters {
		f.skipIndex[i] = -1
		for j, fp := range f.filters {
			if fp.Name() == p.Name() {
				f.skipIndex[i] = j
			}
		}
	}
	for i, p := range f.preFilters {
		if _, ok := p.(PreFilterExtensions); ok {
			f.preFilterExts = append(f.preFilterExts, i)
		}
	}
	f.preScoreIndex = make([]int, len(f.preScores))
	for i, p := range f.preScores {
		f.preScoreIndex[i] = -1
		for j, sp := range f.scores {
			if sp.Name() == p.Name() {
				f.preScoreIndex[i] = j
			}
		}
	}
	return f, nil
}

// NumFilters and NumScores size the per-cycle buffers.
func (f *Framework) NumFilters() int { return len(f.filters) }

// NumScores is the number of score plugins.
func (f *Framework) NumScores() int { return len(f.scores) }

// HasScorePlugins reports whether scoring would change anything.
func (f *Framework) HasScorePlugins() bool { return len(f.scores) > 0 }

// RunPreFilterPlugins runs every PreFilter. skip (len NumFilters) is set for filters to skip this cycle.
// A rejection or an error stops at the first plugin that returns it.
func (f *Framework) RunPreFilterPlugins(state *CycleState, pod *PodInfo, skip []bool) *Status {
	st, _ := f.PreFilter(state, pod, skip)
	return st
}

// PreFilter is RunPreFilterPlugins that also names the plugin that rejected the pod.
func (f *Framework) PreFilter(state *CycleState, pod *PodInfo, skip []bool) (st *Status, rejectedBy string) {
	for i, p := range f.preFilters {
		st := p.PreFilter(state, pod)
		switch st.Code() {
		case Success:
		case Skip:
			if j := f.skipIndex[i]; j >= 0 {
				skip[j] = true
			}
		case Error:
			return AsStatus(fmt.Errorf("prefilter %s: %w", p.Name(), st.AsError())), p.Name()
		default:
			return st, p.Name()
		}
	}
	return nil, ""
}

// RunFilterPlugins runs the filters on one node and returns the first non-success status.
func (f *Framework) RunFilterPlugins(state *CycleState, pod *PodInfo, node *NodeInfo, skip []bool) *Status {
	st, _ := f.Filter(state, pod, node, skip)
	return st
}

// Filter is RunFilterPlugins that also returns the index of the filter that rejected the node (see
// FilterName), -1 when none did.
func (f *Framework) Filter(state *CycleState, pod *PodInfo, node *NodeInfo, skip []bool) (st *Status, rejectedBy int) {
	for i, p := range f.filters {
		if skip[i] {
			continue
		}
		if st := p.Filter(state, pod, node); !st.IsSuccess() {
			if st.Code() == Error {
				return AsStatus(fmt.Errorf("filter %s on node %s: %w", p.Name(), node.Name(), st.AsError())), i
			}
			return st, i
		}
	}
	return nil, -1
}

// FilterName is the name of filter i.
func (f *Framework) FilterName(i int) string { return f.filters[i].Name() }

// RunCandidatePlugins returns the fewest candidate nodes any filter not skipped names (see
// CandidatePlugin), and in skipOn the filters to skip on them: skip plus that filter when its
// candidates are exact. ok=false when none narrows them down.
func (f *Framework) RunCandidatePlugins(state *CycleState, pod *PodInfo, skip, skipOn []bool) (positions []int32, ok bool) {
	best := -1
	var bestExact bool
	for i, p := range f.filters {
		cp, is := p.(CandidatePlugin)
		if !is || skip[i] {
			continue
		}
		if c, exact, narrowed := cp.CandidateNodes(state, pod); narrowed && (!ok || len(c) < len(positions)) {
			positions, ok, best, bestExact = c, true, i, exact
		}
	}
	if ok {
		copy(skipOn, skip)
		skipOn[best] = bestExact
	}
	return positions, ok
}

// RunPreScorePlugins runs every PreScore with the feasible nodes. skip (len NumScores) is set for
// score plugins to skip this cycle. An error stops at the first plugin that returns it; a rejection
// is an error too (PreScore cannot reject a pod).
func (f *Framework) RunPreScorePlugins(state *CycleState, pod *PodInfo, nodes []*NodeInfo, skip []bool) *Status {
	for i, p := range f.preScores {
		st := p.PreScore(state, pod, nodes)
		switch st.Code() {
		case Success:
		case Skip:
			if j := f.preScoreIndex[i]; j >= 0 {
				skip[j] = true
			}
		default:
			return AsStatus(fmt.Errorf("prescore %s: %s", p.Name(), st.Message()))
		}
	}
	return nil
}

// RunReservePlugins runs every Reserve; when one fails, the Unreserve of every reserve plugin runs (in
// reverse order, as kube-scheduler) and the failure is returned.
func (f *Framework) RunReservePlugins(state *CycleState, pod *PodInfo, nodeName string) *Status {
	for _, p := range f.reserves {
		if st := p.Reserve(state, pod, nodeName); !st.IsSuccess() {
			f.RunUnreservePlugins(state, pod, nodeName)
			if st.Code() == Error {
				return AsStatus(fmt.Errorf("reserve %s on node %s: %w", p.Name(), nodeName, st.AsError()))
			}
			return st
		}
	}
	return nil
}

// RunUnreservePlugins runs every Unreserve in reverse order.
func (f *Framework) RunUnreservePlugins(state *CycleState, pod *PodInfo, nodeName string) {
	for i := len(f.reserves) - 1; i >= 0; i-- {
		f.reserves[i].Unreserve(state, pod, nodeName)
	}
}

// HasReservePlugins reports whether Reserve would do anything.
func (f *Framework) HasReservePlugins() bool { return len(f.reserves) > 0 }

// RunScorePlugins scores the feasible nodes. perPlugin must hold NumScores slices (reused between
// cycles); totals receives the weighted sum per node, in the order of nodes. Plugins marked in skip
// (by RunPreScorePlugins; nil skips none) add nothing.
func (f *Framework) RunScorePlugins(state *CycleState, pod *PodInfo, nodes []*NodeInfo, skip []bool, perPlugin [][]NodeScore, totals []NodeScore) ([][]NodeScore, *Status) {
	for i := range totals {
		totals[i] = NodeScore{Node: nodes[i]}
	}
	for i, p := range f.scores {
		if skip != nil && skip[i] {
			continue
		}
		scores := perPlugin[i][:0]
		for _, n := range nodes {
			s, st := p.Score(state, pod, n)
			if !st.IsSuccess() {
				return perPlugin, AsStatus(fmt.Errorf("score %s on node %s: %w", p.Name(), n.Name(), st.AsError()))
			}
			scores = append(scores, NodeScore{Node: n, Score: s})
		}
		perPlugin[i] = scores
		if nz := f.normalizers[i]; nz != nil {
			if st := nz.NormalizeScore(state, pod, scores); !st.IsSuccess() {
				return perPlugin, AsStatus(fmt.Errorf("normalize %s: %w", p.Name(), st.AsError()))
			}
		}
		for j := range scores {
			s := scores[j].Score
			if s < 0 || s > MaxNodeScore {
				return perPlugin, AsStatus(fmt.Errorf("plugin %s gave node %s score %d outside [0, %d]", p.Name(), scores[j].Node.Name(), s, MaxNodeScore))
			}
			totals[j].Score += s * f.weights[i]
		}
	}
	return perPlugin, nil
}

// HasPostFilterPlugins reports whether a failed cycle has anything left to try.
func (f *Framework) HasPostFilterPlugins() bool { return len(f.postFilters) > 0 }

// RunPostFilterPlugins runs the PostFilters until one succeeds (kube-scheduler's order: the first
// success wins). Without a success it returns the rejections' messages joined, or an Error; a
// rejection may still come with a result whose NominatedNode the pod keeps (it waits for its victims).
func (f *Framework) RunPostFilterPlugins(state *CycleState, pod *PodInfo, snap *Snapshot, rejected []NodeStatus, skip []bool) (*PostFilterResult, *Status) {
	in := PostFilterInput{
		Snapshot: snap,
		Rejected: rejected,
		Filter:   func(st *CycleState, n *NodeInfo) *Status { return f.RunFilterPlugins(st, pod, n, skip) },
		AddPod: func(st *CycleState, p *PlacedPod, n *NodeInfo) *Status {
			return f.runPreFilterExtensions(st, pod, p, n, skip, true)
		},
		RemovePod: func(st *CycleState, p *PlacedPod, n *NodeInfo) *Status {
			return f.runPreFilterExtensions(st, pod, p, n, skip, false)
		},
	}
	var reasons []string
	var keep *PostFilterResult
	for _, p := range f.postFilters {
		res, st := p.PostFilter(state, pod, in)
		switch {
		case st.IsSuccess():
			return res, nil
		case st.Code() == Error:
			return nil, AsStatus(fmt.Errorf("postfilter %s: %w", p.Name(), st.AsError()))
		}
		if res != nil && keep == nil {
			keep = res
		}
		reasons = append(reasons, st.Reasons()...)
	}
	return keep, NewStatus(Unschedulable, reasons...)
}

// runPreFilterExtensions runs AddPod (add) or RemovePod of the PreFilter extensions whose PreFilter
// did not Skip this cycle.
func (f *Framework) runPreFilterExtensions(state *CycleState, pod *PodInfo, placed *PlacedPod, node *NodeInfo, skip []bool, add bool) *Status {
	for _, i := range f.preFilterExts {
		if j := f.skipIndex[i]; j >= 0 && skip[j] {
			continue
		}
		ext := f.preFilters[i].(PreFilterExtensions)
		var st *Status
		if add {
			st = ext.AddPod(state, pod, placed, node)
		} else {
			st = ext.RemovePod(state, pod, placed, node)
		}
		if !st.IsSuccess() {
			err := st.AsError()
			if err == nil {
				err = errors.New(st.Message()) // an extension cannot reject: only fail
			}
			return AsStatus(fmt.Errorf("prefilter extension %s on node %s: %w", ext.Name(), node.Name(), err))
		}
	}
	return nil
}
