package framework

import (
	"time"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// AffinityTerm is a compiled PodAffinityTerm, as kube-scheduler's framework.AffinityTerm.
type AffinityTerm struct {
	// Namespaces the term selects by name: the owning pod's own namespace when the term names none and
	// has no namespaceSelector.
	Namespaces []string
	// NamespaceSelector, nil when the term has none; {} selects every namespace.
	NamespaceSelector *LabelSelector
	Selector          *LabelSelector
	TopologyKey       string
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
// assumed by this replica. It is immutable and shared between snapshots.
type PlacedPod struct {
	UID, Namespace, Name string
	Labels               map[string]string
	Priority             int32
	CreationTimestamp    time.Time
	SchedulerName        string
	Requests             *pb.Resources
	// Affinity is nil when the pod has no pod affinity or anti-affinity terms.
	Affinity *PodAffinityTerms
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
		Affinity: CompilePodAffinity(a.GetNamespace(), a.GetPodAffinity(), a.GetPodAntiAffinity()),
	}
	if p.Requests == nil {
		p.Requests = &pb.Resources{}
	}
	if ts := a.GetCreationTimestamp(); ts != nil {
		p.CreationTimestamp = ts.AsTime()
	}
	return p
}
