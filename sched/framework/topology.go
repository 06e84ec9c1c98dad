package framework

import (
	"slices"
	"strings"
	"sync"
	"unique"
)

// TopologyIndex maps a node label key and value to the positions, in the snapshot's name-ordered node
// list, of the nodes carrying it (a topology domain), built per key on first use. Nodes' labels change
// far less often than their pods, so the cache shares one index between the snapshots of an unchanged
// set of node labels and starts a new one when a node is added, removed or relabelled (positions
// change only then): the inter-pod plugins then visit the domain of a node instead of every node.
type TopologyIndex struct {
	mu      sync.Mutex
	keys    map[string]map[string][]int32
	singles map[string]bool // per indexed key: every value is carried by one node
	every   map[string]bool // per indexed key: every node carries it
}

// NewTopologyIndex returns an empty index.
func NewTopologyIndex() *TopologyIndex {
	return &TopologyIndex{keys: map[string]map[string][]int32{}, singles: map[string]bool{}, every: map[string]bool{}}
}

// domains returns key's domains, whether each is a single node, and whether every node carries key.
func (t *TopologyIndex) domains(key string, nodes NodeList) (_ map[string][]int32, single, every bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m, ok := t.keys[key]; ok {
		return m, t.singles[key], t.every[key]
	}
	m := map[string][]int32{}
	i := int32(0)
	single, every = true, true
	for n := range nodes.From(0) {
		if v, ok := n.Labels[key]; ok {
			m[v] = append(m[v], i)
			single = single && len(m[v]) == 1
		} else {
			every = false
		}
		i++
	}
	t.keys[key], t.singles[key], t.every[key] = m, single, every
	return m, single, every
}

// Domains returns, for a node label key, the positions (see NodeAt) of the nodes carrying each of its
// values (the topology domains of key), in name order. Callers must not modify it.
func (s *Snapshot) Domains(key string) map[string][]int32 {
	m, _, _ := s.topology.domains(key, s.nodes)
	return m
}

// DomainsAreNodes reports whether every domain of key is a single node (kubernetes.io/hostname): the
// domain of a node carrying key is then the node itself.
func (s *Snapshot) DomainsAreNodes(key string) bool {
	_, single, _ := s.topology.domains(key, s.nodes)
	return single
}

// EveryNodeIsADomain reports whether every node carries key and is its own domain of it: a plugin
// that counts per domain then needs neither the node's value of key nor to look it up in the node's
// labels (a map lookup per visited node, on the hot path of the inter-pod plugins).
func (s *Snapshot) EveryNodeIsADomain(key string) bool {
	_, single, every := s.topology.domains(key, s.nodes)
	return single && every
}

// NodeAt returns the node at position i of the name-ordered list.
func (s *Snapshot) NodeAt(i int) *NodeInfo { return s.nodes.At(i) }

// AffinityRegistry counts, over every node, the placed pods' required anti-affinity terms by Key, and
// the placed pods with terms that score (required affinity, preferred affinity or anti-affinity). The
// inter-pod plugins read them from the snapshot to learn, without visiting every node, which existing
// terms may concern a pod and whether any existing pod scores.
type AffinityRegistry struct {
	terms   map[unique.Handle[string]]*termCount
	scoring int
	list    []*AffinityTerm // nil when the set of terms changed since the last Terms
}

type termCount struct {
	term  *AffinityTerm
	count int
}

// Update replaces a node's contribution: old (nil for a new node) by cur (nil for a removed one).
func (r *AffinityRegistry) Update(old, cur *NodeInfo) {
	if old != nil {
		r.add(old, -1)
	}
	if cur != nil {
		r.add(cur, 1)
	}
}

func (r *AffinityRegistry) add(n *NodeInfo, sign int) {
	for _, g := range n.RequiredAntiAffinityTerms {
		tc := r.terms[g.Key]
		if tc == nil {
			if r.terms == nil {
				r.terms = map[unique.Handle[string]]*termCount{}
			}
			tc = &termCount{term: g.Term}
			r.terms[g.Key] = tc
			r.list = nil
		}
		if tc.count += sign * g.Count; tc.count <= 0 {
			delete(r.terms, g.Term.Key)
			r.list = nil
		}
	}
	for _, p := range n.PodsWithAffinity {
		if a := p.Affinity; len(a.RequiredAffinity)+len(a.PreferredAffinity)+len(a.PreferredAntiAffinity) > 0 {
			r.scoring += sign
		}
	}
}

// Terms returns the distinct keyed terms, in Key order (cycles over the same cache contents then do the
// same work). The slice is shared with snapshots: callers must not modify it.
func (r *AffinityRegistry) Terms() []*AffinityTerm {
	if r.list == nil {
		r.list = make([]*AffinityTerm, 0, len(r.terms))
		for _, tc := range r.terms {
			r.list = append(r.list, tc.term)
		}
		slices.SortFunc(r.list, func(a, b *AffinityTerm) int { return strings.Compare(a.Key.Value(), b.Key.Value()) })
	}
	return r.list
}

// RequiredAntiAffinityTerms returns the distinct required anti-affinity terms of the placed pods.
func (s *Snapshot) RequiredAntiAffinityTerms() []*AffinityTerm { return s.antiTerms }

// HasScoringAffinity reports whether a placed pod has required affinity or preferred (anti-)affinity
// terms, which InterPodAffinity's score weighs for every incoming pod.
func (s *Snapshot) HasScoringAffinity() bool { return s.scoringPods }

// Topology returns the snapshot's topology index (the cache hands it to the next snapshot).
func (s *Snapshot) Topology() *TopologyIndex { return s.topology }

// NodeList returns the name-ordered node list; its chunks (NumChunks, Chunk) let callers remember what
// they computed over a chunk across snapshots.
func (s *Snapshot) NodeList() NodeList { return s.nodes }
