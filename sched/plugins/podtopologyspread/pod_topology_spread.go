// Package podtopologyspread implements Kubernetes' PodTopologySpread plugin:
//
//   - Filter (whenUnsatisfiable: DoNotSchedule): placing the pod on a node must keep
//     matching pods in the node's domain + 1 (if the pod matches its own selector) - global minimum <= maxSkew,
//     where the global minimum is over the eligible domains, and 0 while fewer than minDomains exist.
//     A node without the topology key is rejected as unresolvable.
//   - Score (whenUnsatisfiable: ScheduleAnyway): fewer matching pods in the node's domains score higher
//     (count × log(number of domains + 2) + maxSkew − 1 per constraint, reversed and normalised);
//     nodes lacking a topology key score 0.
//
// Eligible nodes carry every constraint's topology key and pass the inclusion policies:
// nodeAffinityPolicy (default Honor: the pod's nodeSelector and required node affinity) and
// nodeTaintsPolicy (default Ignore; Honor excludes nodes with untolerated NoSchedule/NoExecute taints).
// Matching pods are those in the pod's namespace whose labels match the labelSelector, with
// matchLabelKeys merged in from the pod's own labels; a nil or empty selector matches no pod.
//
// podbus has no Services, ReplicaSets or StatefulSets for the scheduler to derive kube-scheduler's
// system default constraints from, so a pod without constraints is not spread (the plugin skips it),
// exactly as kube-scheduler with defaultingType: List and no default constraints.
package podtopologyspread

import (
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unique"
	"unsafe"

	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/nodeaffinity"
)

// Name of the plugin.
const Name = "PodTopologySpread"

// Reasons, as kube-scheduler's.
const (
	ErrReasonConstraintsNotMatch = "node(s) didn't match pod topology spread constraints"
	ErrReasonNodeLabelNotMatch   = ErrReasonConstraintsNotMatch + " (missing required label)"
)

// API values.
const (
	DoNotSchedule  = "DoNotSchedule"
	ScheduleAnyway = "ScheduleAnyway"
	PolicyHonor    = "Honor"
	PolicyIgnore   = "Ignore"
	LabelHostname  = "kubernetes.io/hostname"
)

const (
	preFilterKey framework.StateKey = "PreFilter" + Name
	preScoreKey  framework.StateKey = "PreScore" + Name
)

var (
	statusNotMatch     = framework.NewStatus(framework.Unschedulable, ErrReasonConstraintsNotMatch)
	statusMissingLabel = framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonNodeLabelNotMatch)
	statusSkip         = framework.NewStatus(framework.Skip)
)

// PodTopologySpread is the plugin. It keeps running domain totals over the chunks of the snapshot's
// node list (see runningTotals): cycles share most chunks, and a pod's cycle then counts over the few
// chunks that changed since instead of over every node.
type PodTopologySpread struct {
	totals runningTotals
}

var (
	_ framework.PreFilterPlugin      = &PodTopologySpread{}
	_ framework.PreFilterExtensions  = &PodTopologySpread{}
	_ framework.FilterPlugin         = &PodTopologySpread{}
	_ framework.PreScorePlugin       = &PodTopologySpread{}
	_ framework.ScorePlugin          = &PodTopologySpread{}
	_ framework.NormalizeScorePlugin = &PodTopologySpread{}
)

// New returns the plugin.
func New() *PodTopologySpread { return &PodTopologySpread{} }

// Name implements framework.Plugin.
func (*PodTopologySpread) Name() string { return Name }

type constraint struct {
	// sig identifies what the counts depend on besides the namespace and the inclusion policies: the
	// topology key and the selector (with matchLabelKeys merged).
	sig           string
	maxSkew       int32
	key           string
	selector      *framework.LabelSelector
	minDomains    int32
	honorAffinity bool
	honorTaints   bool
}

func constraintsOf(pod *pb.Pod, action string) []constraint {
	var out []constraint
	labels := pod.GetMetadata().GetLabels()
	for _, c := range pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() != action {
			continue
		}
		sel := framework.CompileLabelSelector(c.GetLabelSelector())
		for _, k := range c.GetMatchLabelKeys() {
			if v, ok := labels[k]; ok {
				sel = sel.With(k, v)
			}
		}
		sig := c.GetTopologyKey() + "\x00"
		if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(c.GetLabelSelector()); err == nil {
			sig += string(b)
		}
		for _, k := range c.GetMatchLabelKeys() {
			if v, ok := labels[k]; ok {
				sig += "\x00" + k + "=" + v
			}
		}
		tc := constraint{sig: sig, maxSkew: c.GetMaxSkew(), key: c.GetTopologyKey(), selector: sel, minDomains: 1,
			honorAffinity: c.GetNodeAffinityPolicy() != PolicyIgnore, honorTaints: c.GetNodeTaintsPolicy() == PolicyHonor}
		if c.MinDomains != nil {
			tc.minDomains = c.GetMinDomains()
		}
		out = append(out, tc)
	}
	return out
}

func hasAllKeys(labels map[string]string, cs []constraint) bool {
	for i := range cs {
		if _, ok := labels[cs[i].key]; !ok {
			return false
		}
	}
	return true
}

// included applies the node inclusion policies.
func (c *constraint) included(pod *pb.Pod, node *framework.NodeInfo, req *nodeaffinity.Required) bool {
	if c.honorAffinity && !req.MatchLabels(node.Labels, node.Name()) {
		return false
	}
	if c.honorTaints {
		for _, t := range node.Taints {
			if e := t.GetEffect(); (e == framework.TaintEffectNoSchedule || e == framework.TaintEffectNoExecute) &&
				!framework.TolerationsTolerateTaint(pod.GetSpec().GetTolerations(), t) {
				return false
			}
		}
	}
	return true
}

type preFilterState struct {
	constraints []constraint
	counts      []map[string]int // per constraint: domain -> matching pods
	minMatch    []int            // per constraint: the least count over the eligible domains
	self        []int            // per constraint: 1 if the pod matches its selector
	nodeReq     *nodeaffinity.Required
}

// Clone copies the counts (preemption changes them in a cycle-state clone).
func (s *preFilterState) Clone() framework.StateData {
	c := *s
	c.counts = make([]map[string]int, len(s.counts))
	for i, m := range s.counts {
		c.counts[i] = maps.Clone(m)
	}
	c.minMatch = slices.Clone(s.minMatch)
	return &c
}

// setMin recomputes constraint i's global minimum.
func (s *preFilterState) setMin(i int) {
	m := math.MaxInt32
	for _, c := range s.counts[i] {
		m = min(m, c)
	}
	if len(s.counts[i]) < int(s.constraints[i].minDomains) {
		m = 0 // fewer eligible domains than minDomains: the global minimum counts as 0
	}
	s.minMatch[i] = m
}

// updateWithPod adds (v=1) or removes (v=-1) placed on node in the counts, for the constraints whose
// domain the node is eligible for and whose selector placed matches.
func (s *preFilterState) updateWithPod(pod *framework.PodInfo, placed *framework.PlacedPod, node *framework.NodeInfo, v int) {
	labels := node.Labels
	if placed.Namespace != pod.Pod.GetMetadata().GetNamespace() || !hasAllKeys(labels, s.constraints) {
		return
	}
	for i := range s.constraints {
		c := &s.constraints[i]
		if c.selector.Empty() || !c.selector.Matches(placed.Labels) || !c.included(pod.Pod, node, s.nodeReq) {
			continue
		}
		s.counts[i][labels[c.key]] += v
		s.setMin(i)
	}
}

// AddPod counts placed on node in the cycle state's PreFilter counts.
func (*PodTopologySpread) AddPod(state *framework.CycleState, pod *framework.PodInfo, placed *framework.PlacedPod, node *framework.NodeInfo) *framework.Status {
	s, st := readPreFilter(state)
	if st != nil {
		return st
	}
	s.updateWithPod(pod, placed, node, 1)
	return nil
}

// RemovePod takes placed on node out of the cycle state's PreFilter counts.
func (*PodTopologySpread) RemovePod(state *framework.CycleState, pod *framework.PodInfo, placed *framework.PlacedPod, node *framework.NodeInfo) *framework.Status {
	s, st := readPreFilter(state)
	if st != nil {
		return st
	}
	s.updateWithPod(pod, placed, node, -1)
	return nil
}

func readPreFilter(state *framework.CycleState) (*preFilterState, *framework.Status) {
	return framework.ReadState[*preFilterState](state, preFilterKey)
}

// domainCounts adds up matching pods per domain: in a short list while there are few domains (zones),
// which costs less per node than a map, and in a map beyond that (hostnames).
type domainCounts struct {
	vals []string
	cnts []int
	m    map[string]int
}

const maxListedDomains = 32

func (d *domainCounts) add(v string, n int) {
	if d.m != nil {
		d.m[v] += n
		return
	}
	for i, x := range d.vals {
		if x == v {
			d.cnts[i] += n
			return
		}
	}
	if len(d.vals) < maxListedDomains {
		d.vals, d.cnts = append(d.vals, v), append(d.cnts, n)
		return
	}
	d.m = make(map[string]int, 2*maxListedDomains)
	for i, x := range d.vals {
		d.m[x] = d.cnts[i]
	}
	d.vals, d.cnts = nil, nil
	d.m[v] += n
}

// PreFilter counts matching pods per domain over every eligible node, once per cycle. When the counts
// depend only on the constraints and the namespace, it follows running totals and recounts only the
// chunks of nodes that changed since the last cycle.
func (p *PodTopologySpread) PreFilter(state *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	cs := constraintsOf(pod.Pod, DoNotSchedule)
	if len(cs) == 0 {
		return statusSkip
	}
	req := nodeaffinity.GetRequired(pod.Pod)
	s := &preFilterState{constraints: cs, counts: make([]map[string]int, len(cs)), minMatch: make([]int, len(cs)),
		self: make([]int, len(cs)), nodeReq: req}
	ns := pod.Pod.GetMetadata().GetNamespace()
	for i := range cs {
		if cs[i].selector.Matches(pod.Pod.GetMetadata().GetLabels()) {
			s.self[i] = 1
		}
	}
	// The inclusion policies depend on the pod's node affinity and tolerations: counts that applied
	// one are not shared.
	sig, shared := "", !req.Constrains()
	if shared {
		var b strings.Builder
		b.WriteString(ns)
		for i := range cs {
			if cs[i].honorTaints {
				shared = false
			}
			b.WriteString("\x01")
			b.WriteString(cs[i].sig)
		}
		sig = b.String()
	}
	memos := make([]map[unique.Handle[string]]bool, len(cs))
	for i := range memos {
		memos[i] = map[unique.Handle[string]]bool{}
	}
	nodes := state.Snapshot().NodeList()
	countOf := func(n *framework.NodeInfo, out []nodeShare) { countNode(n, pod.Pod, cs, req, ns, memos, out) }
	if shared {
		p.totals.update(sig, len(cs), nodes, countOf, s.counts)
	} else {
		// Counts for this pod alone: summed node by node, with nothing kept.
		one := make([]nodeShare, len(cs))
		for i := range cs {
			s.counts[i] = map[string]int{}
		}
		for j := range nodes.NumChunks() {
			chunk := nodes.Chunk(j)
			for k := range chunk {
				countOf(&chunk[k], one)
				for i, p := range one {
					if p.ok {
						s.counts[i][p.val] += p.n
					}
				}
			}
		}
	}
	for i := range cs {
		s.setMin(i)
	}
	state.Write(preFilterKey, s)
	return nil
}

// runningTotals keeps, per counts signature, the domain counts summed over the chunks of the last
// snapshot seen, with each chunk's share. A later snapshot differs from it in the few chunks where pods
// were placed or removed since, so the totals follow by taking out those chunks' old shares and adding
// their new ones, instead of summing every chunk again. Within a changed chunk, only the nodes that
// changed are counted again: the others keep their part of the share.
type runningTotals struct {
	mu    sync.Mutex
	bySig map[string]*running
}

type running struct {
	chunks [][]framework.NodeInfo // the chunks counted: their identity, and their nodes' as counted
	parts  [][]nodeShare          // per chunk: per node, per constraint
	shares [][]domainCounts       // per chunk, per constraint
	// per constraint: domain -> {matching pods, chunks listing the domain}; a domain exists while some
	// chunk lists it (an eligible node carries it), even with no matching pod.
	sums []map[string]*[2]int
}

// maxRunningSigs bounds the signatures kept (workloads with spread constraints being scheduled).
const maxRunningSigs = 64

// update brings sig's totals to chunks and writes them, per constraint, into out.
func (t *runningTotals) update(sig string, ncs int, nodes framework.NodeList, countOf func(*framework.NodeInfo, []nodeShare), out []map[string]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.bySig[sig]
	if r == nil || len(r.chunks) != nodes.NumChunks() {
		if t.bySig == nil || len(t.bySig) >= maxRunningSigs {
			t.bySig = map[string]*running{}
		}
		n := nodes.NumChunks()
		r = &running{chunks: make([][]framework.NodeInfo, n), parts: make([][]nodeShare, n),
			shares: make([][]domainCounts, n), sums: make([]map[string]*[2]int, ncs)}
		for i := range r.sums {
			r.sums[i] = map[string]*[2]int{}
		}
		t.bySig[sig] = r
	}
	for j := range nodes.NumChunks() {
		chunk := nodes.Chunk(j)
		old := r.chunks[j]
		if len(old) == len(chunk) && &old[0] == &chunk[0] {
			continue
		}
		if r.shares[j] != nil {
			r.apply(r.shares[j], -1)
		}
		var parts []nodeShare
		if len(old) == len(chunk) {
			parts = make([]nodeShare, len(chunk)*ncs)
			for k := range chunk {
				dst := parts[k*ncs : (k+1)*ncs]
				if sameCounts(&old[k], &chunk[k]) {
					copy(dst, r.parts[j][k*ncs:(k+1)*ncs])
				} else {
					countOf(&chunk[k], dst)
				}
			}
		} else {
			parts = countChunk(chunk, ncs, countOf) // a node came or went: count them all
		}
		counts := sharesOf(parts, ncs)
		r.apply(counts, 1)
		r.chunks[j], r.parts[j], r.shares[j] = chunk, parts, counts
	}
	for i, m := range r.sums {
		out[i] = make(map[string]int, len(m))
		for v, c := range m {
			out[i][v] = c[0]
		}
	}
}

// sameCounts reports whether b, a later version of a's place in the list, counts as a did under a
// shared signature: the same node object (its labels, so its domains) and the same pods (the label
// sets, built anew whenever the node's pods change). The inclusion policies do not apply there.
func sameCounts(a, b *framework.NodeInfo) bool {
	return a.Node == b.Node && a.Name() == b.Name() && len(a.LabelSets) == len(b.LabelSets) &&
		unsafe.SliceData(a.LabelSets) == unsafe.SliceData(b.LabelSets) &&
		reflect.ValueOf(a.Labels).UnsafePointer() == reflect.ValueOf(b.Labels).UnsafePointer()
}

// apply adds (sign 1) or takes out (sign -1) one chunk's share.
func (r *running) apply(share []domainCounts, sign int) {
	for i := range share {
		sums := r.sums[i]
		one := func(v string, n int) {
			c := sums[v]
			if c == nil {
				c = &[2]int{}
				sums[v] = c
			}
			c[0] += sign * n
			c[1] += sign
			if c[1] == 0 {
				delete(sums, v)
			}
		}
		d := &share[i]
		for k, v := range d.vals {
			one(v, d.cnts[k])
		}
		for v, n := range d.m {
			one(v, n)
		}
	}
}

// nodeShare is one node's part of a chunk's counts for one constraint: its domain and the matching pods
// on it, if the node is eligible.
type nodeShare struct {
	val string
	n   int
	ok  bool
}

// countNode counts the pods on n matching each constraint, into out (one entry per constraint).
func countNode(n *framework.NodeInfo, pod *pb.Pod, cs []constraint, req *nodeaffinity.Required, ns string, memos []map[unique.Handle[string]]bool, out []nodeShare) {
	clear(out)
	// One lookup per key and node.
	for i := range cs {
		v, ok := n.Labels[cs[i].key]
		if !ok {
			return
		}
		// Interned: merging the chunks' counts compares values, and equal strings at one address
		// compare at once.
		out[i].val = unique.Make(v).Value()
	}
	for i := range cs {
		if cs[i].included(pod, n, req) {
			out[i].n, out[i].ok = countMatching(n.LabelSets, cs[i].selector, ns, memos[i]), true
		}
	}
}

// countChunk counts every node of a chunk: per node, per constraint.
func countChunk(chunk []framework.NodeInfo, ncs int, countOf func(*framework.NodeInfo, []nodeShare)) []nodeShare {
	parts := make([]nodeShare, len(chunk)*ncs)
	for k := range chunk {
		countOf(&chunk[k], parts[k*ncs:(k+1)*ncs])
	}
	return parts
}

// sharesOf sums a chunk's node parts per domain, per constraint.
func sharesOf(parts []nodeShare, ncs int) []domainCounts {
	out := make([]domainCounts, ncs)
	for k, p := range parts {
		if p.ok {
			out[k%ncs].add(p.val, p.n)
		}
	}
	return out
}

// countMatching counts the pods of a node's label-set groups that are in namespace ns and match sel,
// remembering per label set (PlacedPod.LabelsKey, which includes the namespace) in memo, if not nil,
// whether it matched: a cycle counts every placed pod, and many share their labels.
func countMatching(groups []framework.PodGroup, sel *framework.LabelSelector, ns string, memo map[unique.Handle[string]]bool) int {
	if sel.Empty() {
		return 0
	}
	var zero unique.Handle[string]
	n := 0
	for _, g := range groups {
		m, known := memo[g.Key]
		if !known || g.Key == zero {
			p := g.Example
			m = p.Namespace == ns && sel.Matches(p.Labels)
			if memo != nil && g.Key != zero {
				memo[g.Key] = m
			}
		}
		if m {
			n += g.Count
		}
	}
	return n
}

// Filter checks every DoNotSchedule constraint's skew.
func (*PodTopologySpread) Filter(state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	s, st := readPreFilter(state)
	if st != nil {
		return st
	}
	labels := node.Labels
	for i := range s.constraints {
		c := &s.constraints[i]
		tv, ok := labels[c.key]
		if !ok {
			return statusMissingLabel
		}
		if s.counts[i][tv]+s.self[i]-s.minMatch[i] > int(c.maxSkew) {
			return statusNotMatch
		}
	}
	return nil
}

// maxCandidateDomains bounds the domains CandidateNodes weighs: zones and racks, not hostnames, whose
// thousands of one-node domains narrow nothing down at a cost.
const maxCandidateDomains = 64

// CandidateNodes names the nodes of the domains where the pod may go under a DoNotSchedule constraint
// (see Filter): with few zones and maxSkew 1, often one or two zones of many. Nodes without the key fail
// Filter, so they are left out too. It narrows by the constraint that leaves the fewest nodes; with one
// constraint, the nodes named are exactly those Filter passes.
func (*PodTopologySpread) CandidateNodes(state *framework.CycleState, _ *framework.PodInfo) (_ []int32, exact, ok bool) {
	s, st := readPreFilter(state)
	if st != nil {
		return nil, false, false
	}
	exact = len(s.constraints) == 1
	snap := state.Snapshot()
	total := snap.NumNodes()
	var best [][]int32
	bestN := total
	for i := range s.constraints {
		c := &s.constraints[i]
		doms := snap.Domains(c.key)
		if len(doms) > maxCandidateDomains {
			continue
		}
		var lists [][]int32
		n := 0
		for v, pos := range doms {
			if s.counts[i][v]+s.self[i]-s.minMatch[i] <= int(c.maxSkew) {
				lists = append(lists, pos)
				n += len(pos)
			}
		}
		if n < bestN {
			best, bestN = lists, n
		}
	}
	switch {
	case bestN == total:
		return nil, false, false // every node is a candidate
	case len(best) == 1:
		return best[0], exact, true // already in order
	}
	// Merge the domains' ascending lists through a mark per node: O(nodes), no sort.
	mark := make([]bool, total)
	for _, l := range best {
		for _, p := range l {
			mark[p] = true
		}
	}
	out := make([]int32, 0, bestN)
	for p, ok := range mark {
		if ok {
			out = append(out, int32(p))
		}
	}
	return out, exact, true
}

type preScoreState struct {
	constraints []constraint
	ignored     map[*framework.NodeInfo]bool // feasible nodes lacking a topology key
	counts      []map[string]int64           // per constraint (hostname: computed in Score)
	weights     []float64                    // per constraint: log(domains + 2)
}

// PreScore counts matching pods in the domains of the feasible nodes, over every eligible node.
func (*PodTopologySpread) PreScore(state *framework.CycleState, pod *framework.PodInfo, nodes []*framework.NodeInfo) *framework.Status {
	cs := constraintsOf(pod.Pod, ScheduleAnyway)
	if len(cs) == 0 || len(nodes) == 0 {
		return statusSkip
	}
	s := &preScoreState{constraints: cs, ignored: map[*framework.NodeInfo]bool{},
		counts: make([]map[string]int64, len(cs)), weights: make([]float64, len(cs))}
	for i := range cs {
		s.counts[i] = map[string]int64{}
	}
	for _, n := range nodes {
		labels := n.Labels
		if !hasAllKeys(labels, cs) {
			s.ignored[n] = true
			continue
		}
		for i := range cs {
			if cs[i].key != LabelHostname {
				s.counts[i][labels[cs[i].key]] += 0
			}
		}
	}
	for i := range cs {
		size := len(s.counts[i])
		if cs[i].key == LabelHostname {
			size = len(nodes) - len(s.ignored)
		}
		s.weights[i] = math.Log(float64(size + 2))
	}
	req := nodeaffinity.GetRequired(pod.Pod)
	ns := pod.Pod.GetMetadata().GetNamespace()
	memos := make([]map[unique.Handle[string]]bool, len(cs))
	for i := range memos {
		memos[i] = map[unique.Handle[string]]bool{}
	}
	for _, n := range state.Snapshot().Nodes() {
		labels := n.Labels
		if !hasAllKeys(labels, cs) {
			continue
		}
		for i := range cs {
			if cs[i].key == LabelHostname || !cs[i].included(pod.Pod, n, req) {
				continue
			}
			v := labels[cs[i].key]
			if _, ok := s.counts[i][v]; ok {
				s.counts[i][v] += int64(countMatching(n.LabelSets, cs[i].selector, ns, memos[i]))
			}
		}
	}
	state.Write(preScoreKey, s)
	return nil
}

func readPreScore(state *framework.CycleState) (*preScoreState, *framework.Status) {
	return framework.ReadState[*preScoreState](state, preScoreKey)
}

// Score is the weighted count of matching pods in the node's domains (lower is better).
func (*PodTopologySpread) Score(state *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	s, st := readPreScore(state)
	if st != nil {
		return 0, st
	}
	if s.ignored[node] {
		return 0, nil
	}
	labels := node.Labels
	var score float64
	for i := range s.constraints {
		c := &s.constraints[i]
		tv, ok := labels[c.key]
		if !ok {
			continue
		}
		var cnt int64
		if c.key == LabelHostname {
			cnt = int64(countMatching(node.LabelSets, c.selector, pod.Pod.GetMetadata().GetNamespace(), nil))
		} else {
			cnt = s.counts[i][tv]
		}
		score += float64(cnt)*s.weights[i] + float64(c.maxSkew-1)
	}
	return int64(math.Round(score)), nil
}

// NormalizeScore reverses onto 0..100 (fewest matching pods: 100); ignored nodes score 0.
func (*PodTopologySpread) NormalizeScore(state *framework.CycleState, _ *framework.PodInfo, scores []framework.NodeScore) *framework.Status {
	s, st := readPreScore(state)
	if st != nil {
		return st
	}
	minS, maxS := int64(math.MaxInt64), int64(0)
	for i := range scores {
		if s.ignored[scores[i].Node] {
			continue
		}
		minS, maxS = min(minS, scores[i].Score), max(maxS, scores[i].Score)
	}
	for i := range scores {
		switch {
		case s.ignored[scores[i].Node]:
			scores[i].Score = 0
		case maxS == 0:
			scores[i].Score = framework.MaxNodeScore
		default:
			scores[i].Score = framework.MaxNodeScore * (maxS + minS - scores[i].Score) / maxS
		}
	}
	return nil
}
