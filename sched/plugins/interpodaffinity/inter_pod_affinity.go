// Package interpodaffinity implements Kubernetes' InterPodAffinity plugin over the pods the snapshot
// lists per node (committed and assumed):
//
//   - Filter: the pod's required affinity terms must each find a matching pod in the node's domain
//     (topologyKey value), except for the first pod of a group whose terms match itself while no pod
//     matches yet; no pod matching a required anti-affinity term may be in the node's domain; and no
//     existing pod's required anti-affinity term may match the pod within that pod's domain (symmetry).
//   - Score: preferred terms of the pod (+/- weight per matching pod in the domain) and, symmetrically,
//     of the existing pods (preferred terms, and required affinity terms at hardPodAffinityWeight 1),
//     summed per topology pair once per cycle in PreScore, then min-max normalised to 0..100.
//
// Counts: the pod's required affinity is counted over every node in PreFilter, as kube-scheduler
// does. Anti-affinity, the pod's own and the existing pods' (symmetry), is counted per topology
// domain the first time Filter needs it, over the domain's nodes only (the snapshot's topology
// index), and PreFilter learns which existing terms concern the pod from the snapshot's registry of
// distinct terms: a cycle visits a fraction of the nodes, and with topologyKey hostname a domain is
// one node. PreScore runs over the nodes hosting pods with (anti-)affinity, and over every node only
// when the pod has preferred terms of its own. Namespaces: a term without namespaces and
// namespaceSelector means the owning pod's namespace; a namespaceSelector is matched against the
// namespace's kubernetes.io/metadata.name label (podbus keeps no other namespace labels).
package interpodaffinity

import (
	"maps"
	"math"
	"slices"
	"unique"

	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "InterPodAffinity"

// Reasons, as kube-scheduler's.
const (
	ErrReasonAffinityRulesNotMatch             = "node(s) didn't match pod affinity rules"
	ErrReasonAntiAffinityRulesNotMatch         = "node(s) didn't match pod anti-affinity rules"
	ErrReasonExistingAntiAffinityRulesNotMatch = "node(s) didn't satisfy existing pods anti-affinity rules"
)

// HardPodAffinityWeight is the score weight of an existing pod's required affinity term that the
// incoming pod matches (kube-scheduler's default hardPodAffinityWeight).
const HardPodAffinityWeight = 1

const (
	preFilterKey framework.StateKey = "PreFilter" + Name
	preScoreKey  framework.StateKey = "PreScore" + Name
)

var (
	statusAffinity        = framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonAffinityRulesNotMatch)
	statusAntiAffinity    = framework.NewStatus(framework.Unschedulable, ErrReasonAntiAffinityRulesNotMatch)
	statusExistingAntiAff = framework.NewStatus(framework.Unschedulable, ErrReasonExistingAntiAffinityRulesNotMatch)
	statusSkip            = framework.NewStatus(framework.Skip)
	emptyTerms            = &framework.PodAffinityTerms{}
)

// InterPodAffinity is the plugin.
type InterPodAffinity struct{}

var (
	_ framework.PreFilterPlugin      = &InterPodAffinity{}
	_ framework.PreFilterExtensions  = &InterPodAffinity{}
	_ framework.FilterPlugin         = &InterPodAffinity{}
	_ framework.PreScorePlugin       = &InterPodAffinity{}
	_ framework.ScorePlugin          = &InterPodAffinity{}
	_ framework.NormalizeScorePlugin = &InterPodAffinity{}
)

// New returns the plugin.
func New() *InterPodAffinity { return &InterPodAffinity{} }

// Name implements framework.Plugin.
func (*InterPodAffinity) Name() string { return Name }

type topologyPair struct{ key, value string }

type preFilterState struct {
	terms *framework.PodAffinityTerms
	// affinity: pairs with pods matching all of the pod's required affinity terms (per term's key),
	// counted over every node in PreFilter.
	affinity map[topologyPair]int64
	// selfMatch: the pod matches all its own required affinity terms (the first pod of a group).
	selfMatch bool

	// The anti-affinity counts are taken per topology domain when Filter first needs one (a pair not
	// yet in a memo): a cycle visits a fraction of the nodes, and for topologyKey hostname a domain is
	// one node, where counting over the cluster up front visited every node holding pods.
	//
	// existingTerms: the distinct required anti-affinity terms of placed pods that match the pod, to
	// the index of their topology key in existingKeys.
	existingTerms map[unique.Handle[string]]int
	existingKeys  []string
	// Per pair: pods holding a matching existing term (existingMemo), pods matching one of the pod's
	// own required anti-affinity terms of that key (antiMemo); shared by clones, Filter runs one node
	// at a time. labelMemo: per label set, which own anti-affinity terms it matches.
	lazy *lazyCounts
	// Changes since the snapshot (AddPod/RemovePod during preemption), added to the memos' counts.
	existingDelta, antiDelta map[topologyPair]int64
}

type lazyCounts struct {
	snap                   *framework.Snapshot
	domains                map[string]map[string][]int32 // per topology key: see Snapshot.Domains
	singles                map[string]bool               // per topology key: see Snapshot.DomainsAreNodes
	ownDomains             map[string]bool               // per topology key: see Snapshot.EveryNodeIsADomain
	existingMemo, antiMemo map[topologyPair]int64
	labelMemo              map[unique.Handle[string]][]bool
}

func update(m map[topologyPair]int64, labels map[string]string, key string, v int64) map[topologyPair]int64 {
	tv, ok := labels[key]
	if !ok {
		return m
	}
	if m == nil {
		m = map[topologyPair]int64{}
	}
	p := topologyPair{key, tv}
	m[p] += v
	if m[p] == 0 {
		delete(m, p)
	}
	return m
}

func matchesAll(terms []framework.AffinityTerm, ns string, labels map[string]string) bool {
	if len(terms) == 0 {
		return false
	}
	for i := range terms {
		if !terms[i].Matches(ns, labels) {
			return false
		}
	}
	return true
}

// PreFilter finds which existing terms concern the pod (once per distinct term) and counts, over every
// node, the pods its required affinity terms match (once per distinct label set). The anti-affinity
// counts are left to Filter, per domain.
func (*InterPodAffinity) PreFilter(state *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	snap := state.Snapshot()
	ns, labels := pod.Pod.GetMetadata().GetNamespace(), pod.Pod.GetMetadata().GetLabels()
	terms := pod.Affinity
	if terms == nil {
		terms = emptyTerms
	}
	req, anti := terms.RequiredAffinity, terms.RequiredAntiAffinity
	s := &preFilterState{terms: terms, lazy: &lazyCounts{snap: snap}}
	// Existing pods' required anti-affinity (symmetry).
	for _, t := range snap.RequiredAntiAffinityTerms() {
		if t.Matches(ns, labels) {
			if s.existingTerms == nil {
				s.existingTerms = map[unique.Handle[string]]int{}
			}
			k := slices.Index(s.existingKeys, t.TopologyKey)
			if k < 0 {
				k = len(s.existingKeys)
				s.existingKeys = append(s.existingKeys, t.TopologyKey)
			}
			s.existingTerms[t.Key] = k
		}
	}
	if len(s.existingTerms) == 0 && len(req) == 0 && len(anti) == 0 {
		return statusSkip // nothing to check: no state
	}
	if len(req) > 0 {
		// Per label set: whether it matches all required affinity terms.
		memo := map[unique.Handle[string]]bool{}
		zero := unique.Handle[string]{}
		for _, n := range snap.Nodes() {
			nl := n.Labels
			for _, g := range n.LabelSets {
				ep := g.Example
				all, known := memo[ep.LabelsKey]
				if !known || ep.LabelsKey == zero {
					all = matchesAll(req, ep.Namespace, ep.Labels)
					if ep.LabelsKey != zero {
						memo[ep.LabelsKey] = all
					}
				}
				if all {
					for i := range req {
						s.affinity = update(s.affinity, nl, req[i].TopologyKey, int64(g.Count))
					}
				}
			}
		}
		s.selfMatch = matchesAll(req, ns, labels)
	}
	state.Write(preFilterKey, s)
	return nil
}

// domainsAreNodes reports (and remembers for the cycle) whether every domain of key is one node.
func (l *lazyCounts) domainsAreNodes(key string) bool {
	return remember(&l.singles, key, l.snap.DomainsAreNodes)
}

// remember returns f(key), computed once per map.
func remember(m *map[string]bool, key string, f func(string) bool) bool {
	v, ok := (*m)[key]
	if !ok {
		if *m == nil {
			*m = map[string]bool{}
		}
		v = f(key)
		(*m)[key] = v
	}
	return v
}

// value is node's value of key for counting with deltas (the counts a preemption changed) of that
// kind: "" when every node carries key as its own domain and nothing changed the counts, since count
// then counts the node itself and never reads the value. ok is false when the node lacks key.
func (l *lazyCounts) value(labels map[string]string, key string, deltas int) (string, bool) {
	if deltas == 0 && remember(&l.ownDomains, key, l.snap.EveryNodeIsADomain) {
		return "", true
	}
	v, ok := labels[key]
	return v, ok
}

// domain returns the positions of the nodes in the pair's domain.
func (l *lazyCounts) domain(p topologyPair) []int32 {
	d, ok := l.domains[p.key]
	if !ok {
		if l.domains == nil {
			l.domains = map[string]map[string][]int32{}
		}
		d = l.snap.Domains(p.key)
		l.domains[p.key] = d
	}
	return d[p.value]
}

// count returns the memo's count for p, or else counts it over the domain's nodes with fn (and keeps
// it when the domain has more than one node: one node is counted faster than a memo is filled). node
// is the node being filtered, which carries p: when every domain of the key is a single node and the
// cycle state has no changes (deltas is empty), node holds exactly the pods its snapshot entry holds
// (the pods a preemption took off it changed nothing, or they would have made deltas), so it is
// counted directly, without looking its domain up.
func (l *lazyCounts) count(memo *map[topologyPair]int64, p topologyPair, node *framework.NodeInfo, deltas int, fn func(*framework.NodeInfo) int64) int64 {
	if deltas == 0 && l.domainsAreNodes(p.key) {
		return fn(node)
	}
	nodes := l.domain(p)
	if len(nodes) > 1 {
		if c, ok := (*memo)[p]; ok {
			return c
		}
	}
	var c int64
	for _, i := range nodes {
		c += fn(l.snap.NodeAt(int(i)))
	}
	if len(nodes) > 1 {
		if *memo == nil {
			*memo = map[topologyPair]int64{}
		}
		(*memo)[p] = c
	}
	return c
}

// existingCount is how many placed pods in the domain of existingKeys[k]=value hold a required
// anti-affinity term with that topology key that matches the pod.
func (s *preFilterState) existingCount(k int, value string, node *framework.NodeInfo) int64 {
	p := topologyPair{s.existingKeys[k], value}
	c := s.lazy.count(&s.lazy.existingMemo, p, node, len(s.existingDelta), func(n *framework.NodeInfo) (c int64) {
		for _, g := range n.RequiredAntiAffinityTerms {
			if tk, ok := s.existingTerms[g.Key]; ok && tk == k {
				c += int64(g.Count)
			}
		}
		return c
	})
	return c + s.existingDelta[p]
}

// antiCount is how many placed pods in the pair's domain match one of the pod's own required
// anti-affinity terms with the pair's topology key.
func (s *preFilterState) antiCount(p topologyPair, node *framework.NodeInfo) int64 {
	anti := s.terms.RequiredAntiAffinity
	c := s.lazy.count(&s.lazy.antiMemo, p, node, len(s.antiDelta), func(n *framework.NodeInfo) (c int64) {
		var zero unique.Handle[string]
		for _, g := range n.LabelSets {
			v, known := s.lazy.labelMemo[g.Key]
			if !known || g.Key == zero {
				ep := g.Example
				v = make([]bool, len(anti))
				for i := range anti {
					v[i] = anti[i].Matches(ep.Namespace, ep.Labels)
				}
				if ep.LabelsKey != zero {
					if s.lazy.labelMemo == nil {
						s.lazy.labelMemo = map[unique.Handle[string]][]bool{}
					}
					s.lazy.labelMemo[ep.LabelsKey] = v
				}
			}
			for i, m := range v {
				if m && anti[i].TopologyKey == p.key {
					c += int64(g.Count)
				}
			}
		}
		return c
	})
	return c + s.antiDelta[p]
}

// Clone copies the counts (preemption changes them in a cycle-state clone); the memos of the
// snapshot's counts are shared.
func (s *preFilterState) Clone() framework.StateData {
	c := *s
	c.affinity = maps.Clone(s.affinity)
	c.existingKeys = slices.Clone(s.existingKeys)
	c.existingDelta = maps.Clone(s.existingDelta)
	c.antiDelta = maps.Clone(s.antiDelta)
	return &c
}

// updateWithPod adds (v=1) or removes (v=-1) placed's contribution on node to the counts, as
// kube-scheduler's preFilterState.updateWithPod.
func (s *preFilterState) updateWithPod(pod *framework.PodInfo, placed *framework.PlacedPod, node *framework.NodeInfo, v int64) {
	nl := node.Labels
	if placed.HasRequiredAntiAffinity() {
		ns, labels := pod.Pod.GetMetadata().GetNamespace(), pod.Pod.GetMetadata().GetLabels()
		for i := range placed.Affinity.RequiredAntiAffinity {
			if t := &placed.Affinity.RequiredAntiAffinity[i]; t.Matches(ns, labels) {
				s.existingDelta = update(s.existingDelta, nl, t.TopologyKey, v)
				if !slices.Contains(s.existingKeys, t.TopologyKey) {
					s.existingKeys = append(s.existingKeys, t.TopologyKey)
				}
			}
		}
	}
	req, anti := s.terms.RequiredAffinity, s.terms.RequiredAntiAffinity
	if matchesAll(req, placed.Namespace, placed.Labels) {
		for i := range req {
			s.affinity = update(s.affinity, nl, req[i].TopologyKey, v)
		}
	}
	for i := range anti {
		if anti[i].Matches(placed.Namespace, placed.Labels) {
			s.antiDelta = update(s.antiDelta, nl, anti[i].TopologyKey, v)
		}
	}
}

// AddPod counts placed on node in the cycle state's PreFilter counts.
func (*InterPodAffinity) AddPod(state *framework.CycleState, pod *framework.PodInfo, placed *framework.PlacedPod, node *framework.NodeInfo) *framework.Status {
	s, st := readPreFilter(state)
	if st != nil {
		return st
	}
	s.updateWithPod(pod, placed, node, 1)
	return nil
}

// RemovePod takes placed on node out of the cycle state's PreFilter counts.
func (*InterPodAffinity) RemovePod(state *framework.CycleState, pod *framework.PodInfo, placed *framework.PlacedPod, node *framework.NodeInfo) *framework.Status {
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

// Filter checks the three rules in kube-scheduler's order.
func (*InterPodAffinity) Filter(state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	s, st := readPreFilter(state)
	if st != nil {
		return st
	}
	labels := node.Labels
	if !satisfyAffinity(s, labels) {
		return statusAffinity
	}
	for i := range s.terms.RequiredAntiAffinity {
		k := s.terms.RequiredAntiAffinity[i].TopologyKey
		if v, ok := s.lazy.value(labels, k, len(s.antiDelta)); ok && s.antiCount(topologyPair{k, v}, node) > 0 {
			return statusAntiAffinity
		}
	}
	for i, k := range s.existingKeys {
		if v, ok := s.lazy.value(labels, k, len(s.existingDelta)); ok && s.existingCount(i, v, node) > 0 {
			return statusExistingAntiAff
		}
	}
	return nil
}

func satisfyAffinity(s *preFilterState, labels map[string]string) bool {
	podsExist := true
	for i := range s.terms.RequiredAffinity {
		k := s.terms.RequiredAffinity[i].TopologyKey
		v, ok := labels[k]
		if !ok {
			return false // every topology key must be on the node
		}
		if s.affinity[topologyPair{k, v}] <= 0 {
			podsExist = false
		}
	}
	if !podsExist {
		// The first pod of a group with affinity to itself may go anywhere while no pod matches yet,
		// or no such group could ever start.
		return len(s.affinity) == 0 && s.selfMatch
	}
	return true
}

// preScoreState: topology key -> value -> score.
type preScoreState struct {
	scores scoreMap
}

type scoreMap map[string]map[string]int64

func (s *scoreMap) add(nodeLabels map[string]string, key string, v int64) {
	tv, ok := nodeLabels[key]
	if !ok || v == 0 {
		return
	}
	if *s == nil {
		*s = scoreMap{}
	}
	m := (*s)[key]
	if m == nil {
		m = map[string]int64{}
		(*s)[key] = m
	}
	m[tv] += v
}

// PreScore sums, per topology pair, the weights of every preferred term satisfied there, in both
// directions (the pod's terms over existing pods, existing pods' terms over the pod).
func (*InterPodAffinity) PreScore(state *framework.CycleState, pod *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	snap := state.Snapshot()
	ns, labels := pod.Pod.GetMetadata().GetNamespace(), pod.Pod.GetMetadata().GetLabels()
	terms := pod.Affinity
	hasOwn := terms != nil && (len(terms.PreferredAffinity) > 0 || len(terms.PreferredAntiAffinity) > 0)
	if !hasOwn && !snap.HasScoringAffinity() {
		return statusSkip // no term on either side scores
	}
	nodes := snap.HavePodsWithAffinity()
	if hasOwn {
		nodes = snap.Nodes()
	}
	var s scoreMap
	for _, n := range nodes {
		nl := n.Labels
		if len(nl) == 0 {
			continue
		}
		pods := n.PodsWithAffinity
		if hasOwn {
			pods = n.Pods
		}
		for _, ep := range pods {
			if hasOwn {
				for i := range terms.PreferredAffinity {
					if t := &terms.PreferredAffinity[i]; t.Matches(ep.Namespace, ep.Labels) {
						s.add(nl, t.TopologyKey, int64(t.Weight))
					}
				}
				for i := range terms.PreferredAntiAffinity {
					if t := &terms.PreferredAntiAffinity[i]; t.Matches(ep.Namespace, ep.Labels) {
						s.add(nl, t.TopologyKey, -int64(t.Weight))
					}
				}
			}
			ea := ep.Affinity
			if ea == nil {
				continue
			}
			for i := range ea.RequiredAffinity {
				if t := &ea.RequiredAffinity[i]; t.Matches(ns, labels) {
					s.add(nl, t.TopologyKey, HardPodAffinityWeight)
				}
			}
			for i := range ea.PreferredAffinity {
				if t := &ea.PreferredAffinity[i]; t.Matches(ns, labels) {
					s.add(nl, t.TopologyKey, int64(t.Weight))
				}
			}
			for i := range ea.PreferredAntiAffinity {
				if t := &ea.PreferredAntiAffinity[i]; t.Matches(ns, labels) {
					s.add(nl, t.TopologyKey, -int64(t.Weight))
				}
			}
		}
	}
	if len(s) == 0 {
		return statusSkip
	}
	state.Write(preScoreKey, &preScoreState{scores: s})
	return nil
}

// Score sums the node's pairs.
func (*InterPodAffinity) Score(state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	s, st := framework.ReadState[*preScoreState](state, preScoreKey)
	if st != nil {
		return 0, st
	}
	var score int64
	labels := node.Labels
	for k, values := range s.scores {
		if v, ok := labels[k]; ok {
			score += values[v]
		}
	}
	return score, nil
}

// NormalizeScore maps [min, max] onto [0, 100] (all equal: 0), as kube-scheduler.
func (*InterPodAffinity) NormalizeScore(_ *framework.CycleState, _ *framework.PodInfo, scores []framework.NodeScore) *framework.Status {
	if len(scores) == 0 {
		return nil
	}
	minS, maxS := int64(math.MaxInt64), int64(math.MinInt64)
	for i := range scores {
		minS, maxS = min(minS, scores[i].Score), max(maxS, scores[i].Score)
	}
	diff := maxS - minS
	for i := range scores {
		f := float64(0)
		if diff > 0 {
			f = float64(framework.MaxNodeScore) * float64(scores[i].Score-minS) / float64(diff)
		}
		scores[i].Score = int64(f)
	}
	return nil
}
