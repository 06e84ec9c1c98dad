package framework

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unique"

	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// unkeyedTerms numbers the compiled terms whose Key could not come from their contents.
var unkeyedTerms atomic.Uint64

// AffinityTerm is a compiled PodAffinityTerm, as kube-scheduler's framework.AffinityTerm.
type AffinityTerm struct {
	// Namespaces the term selects by name: the owning pod's own namespace when the term names none and
	// has no namespaceSelector.
	Namespaces []string
	// NamespaceSelector, nil when the term has none; {} selects every namespace.
	NamespaceSelector *LabelSelector
	Selector          *LabelSelector
	TopologyKey       string
	// Key is the same for equal terms of pods in the same namespace, so a cycle can match each
	// distinct term once instead of once per pod holding it, and the cache can list the distinct
	// terms (AffinityRegistry). It is never zero for a compiled term.
	Key unique.Handle[string]
}

// WeightedAffinityTerm is a compiled preferred term.
type WeightedAffinityTerm struct {
	AffinityTerm
	Weight int32
}

// Matches reports whether a pod in namespace ns with labels is selected by the term: its namespace is
// listed or selected, and its labels match.
func (t *AffinityTerm) Matches(ns string, labels map[string]string) bool {
	if containsString(t.Namespaces, ns) || (t.NamespaceSelector != nil && t.NamespaceSelector.Matches(map[string]string{LabelNamespaceName: ns})) {
		return t.Selector.Matches(labels)
	}
	return false
}

func newAffinityTerm(ownNS string, t *pb.PodAffinityTerm) AffinityTerm {
	at := AffinityTerm{Selector: CompileLabelSelector(t.GetLabelSelector()), TopologyKey: t.GetTopologyKey()}
	if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(t); err == nil {
		at.Key = unique.Make(ownNS + "\x00" + string(b))
	} else {
		// Not expected for a decoded message; a key of its own keeps the term apart from every other.
		at.Key = unique.Make(fmt.Sprintf("%s\x01%d", ownNS, unkeyedTerms.Add(1)))
	}
	if t.GetNamespaceSelector() != nil {
		at.NamespaceSelector = CompileLabelSelector(t.GetNamespaceSelector())
	}
	if len(t.GetNamespaces()) == 0 && t.GetNamespaceSelector() == nil {
		at.Namespaces = []string{ownNS}
	} else {
		at.Namespaces = t.GetNamespaces()
	}
	return at
}

// PodAffinityTerms are a pod's compiled pod affinity and anti-affinity terms.
type PodAffinityTerms struct {
	RequiredAffinity, RequiredAntiAffinity   []AffinityTerm
	PreferredAffinity, PreferredAntiAffinity []WeightedAffinityTerm
}

// CompilePodAffinity compiles the terms of a pod in namespace ns; nil when there are none.
func CompilePodAffinity(ns string, affinity, anti *pb.PodAffinity) *PodAffinityTerms {
	if len(affinity.GetRequired())+len(affinity.GetPreferred())+len(anti.GetRequired())+len(anti.GetPreferred()) == 0 {
		return nil
	}
	t := &PodAffinityTerms{}
	for _, r := range affinity.GetRequired() {
		t.RequiredAffinity = append(t.RequiredAffinity, newAffinityTerm(ns, r))
	}
	for _, r := range anti.GetRequired() {
		t.RequiredAntiAffinity = append(t.RequiredAntiAffinity, newAffinityTerm(ns, r))
	}
	for _, p := range affinity.GetPreferred() {
		t.PreferredAffinity = append(t.PreferredAffinity, WeightedAffinityTerm{AffinityTerm: newAffinityTerm(ns, p.GetTerm()), Weight: p.GetWeight()})
	}
	for _, p := range anti.GetPreferred() {
		t.PreferredAntiAffinity = append(t.PreferredAntiAffinity, WeightedAffinityTerm{AffinityTerm: newAffinityTerm(ns, p.GetTerm()), Weight: p.GetWeight()})
	}
	return t
}

// PlacedPod is a pod on a node as plugins see it: committed by the binder (its alloc record entry) or
// assumed by this replica. It is immutable and shared between snapshots, but for an assumption's one
// step to confirmed (see Confirm).
type PlacedPod struct {
	UID, Namespace, Name string
	Labels               map[string]string
	// LabelsKey is the same for pods with the same namespace and labels, so a cycle can match each
	// distinct label set once against a term (zero: unknown, match every time).
	LabelsKey         unique.Handle[string]
	Priority          int32
	CreationTimestamp time.Time
	SchedulerName     string
	Requests          *pb.Resources
	// Affinity is nil when the pod has no pod affinity or anti-affinity terms.
	Affinity *PodAffinityTerms
	// PreemptedBy is the uid of the pod this one is being evicted for ("" when none), from the alloc
	// record.
	PreemptedBy string
	// assumption is set on the PlacedPods of this replica's assumptions (see Assumed), and shared by
	// their copies.
	assumption *assumption
}

type assumption struct{ confirmed atomic.Bool }

// Assumed reports whether the pod is only this replica's assumption, not in the alloc record yet.
// Preemption cannot evict such a pod (the binder marks victims in the alloc record), so it is never a
// victim.
func (p *PlacedPod) Assumed() bool { return p.assumption != nil && !p.assumption.confirmed.Load() }

// Confirm records that the alloc record lists an assumed pod, wherever its PlacedPod is held: the cache
// confirms a commit that changes nothing else on the node without rebuilding its NodeInfo. An earlier
// snapshot then sees the pod committed too, which it is.
func (p *PlacedPod) Confirm() {
	if p.assumption != nil {
		p.assumption.confirmed.Store(true)
	}
}

// HasAffinity reports whether the pod has any pod (anti-)affinity term.
func (p *PlacedPod) HasAffinity() bool { return p.Affinity != nil }

// HasRequiredAntiAffinity reports whether the pod has a required anti-affinity term.
func (p *PlacedPod) HasRequiredAntiAffinity() bool {
	return p.Affinity != nil && len(p.Affinity.RequiredAntiAffinity) > 0
}

// NewPlacedPod builds the PlacedPod of an alloc record entry.
func NewPlacedPod(uid string, a *pb.PodAllocation) *PlacedPod {
	p := &PlacedPod{
		UID: uid, Namespace: a.GetNamespace(), Name: a.GetName(), Labels: a.GetLabels(), Priority: a.GetPriority(),
		SchedulerName: a.GetSchedulerName(), Requests: a.GetRequests(),
		Affinity:    CompilePodAffinity(a.GetNamespace(), a.GetPodAffinity(), a.GetPodAntiAffinity()),
		PreemptedBy: a.GetPreemptedBy(),
		LabelsKey:   LabelsKey(a.GetNamespace(), a.GetLabels()),
	}
	if p.Requests == nil {
		p.Requests = &pb.Resources{}
	}
	if ts := a.GetCreationTimestamp(); ts != nil {
		p.CreationTimestamp = ts.AsTime()
	}
	return p
}

// Committed returns p as the alloc record entry a lists it: p itself when nothing differs, else a copy
// (an assumed pod's PlacedPod once the binder committed it, or a victim the binder marked), which
// keeps the compiled affinity terms.
func (p *PlacedPod) Committed(a *pb.PodAllocation) *PlacedPod {
	if !p.Assumed() && p.PreemptedBy == a.GetPreemptedBy() {
		return p
	}
	c := *p
	c.assumption, c.PreemptedBy = nil, a.GetPreemptedBy()
	return &c
}

// WithRequests returns a copy of p that requests r, for an alloc entry rewritten with other requests.
func (p *PlacedPod) WithRequests(r *pb.Resources) *PlacedPod {
	c := *p
	c.Requests = r
	if c.Requests == nil {
		c.Requests = &pb.Resources{}
	}
	return &c
}

// LabelsKey interns a pod's namespace and labels (see PlacedPod.LabelsKey). Handles of label sets no
// pod holds any more are collected.
func LabelsKey(ns string, labels map[string]string) unique.Handle[string] {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(ns)
	for _, k := range keys {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte(1) // neither keys nor values may hold control characters
		b.WriteString(labels[k])
	}
	return unique.Make(b.String())
}
