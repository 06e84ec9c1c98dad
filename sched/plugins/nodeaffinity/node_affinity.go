// Package nodeaffinity implements Kubernetes' NodeAffinity plugin: spec.nodeSelector and
// requiredDuringSchedulingIgnoredDuringExecution as a filter, preferredDuringScheduling... as a score
// (sum of the weights of the matching terms, normalised to 0..100).
//
// Semantics (k8s.io/component-helpers nodeaffinity): nodeSelector entries are ANDed; required terms are
// ORed and the expressions inside a term ANDed; an empty term matches nothing; NotIn and DoesNotExist
// match nodes without the label; Gt/Lt compare integers; matchFields supports only metadata.name.
package nodeaffinity

import (
	"strconv"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// Name of the plugin.
const Name = "NodeAffinity"

// ErrReasonPod is the filter reason, for nodeSelector and required affinity alike.
const ErrReasonPod = "node(s) didn't match Pod's node affinity/selector"

const stateKey framework.StateKey = "PreFilter" + Name

var (
	statusMismatch = framework.NewStatus(framework.UnschedulableAndUnresolvable, ErrReasonPod)
	statusSkip     = framework.NewStatus(framework.Skip)
)

// NodeAffinity is the plugin.
type NodeAffinity struct{}

var (
	_ framework.PreFilterPlugin      = &NodeAffinity{}
	_ framework.FilterPlugin         = &NodeAffinity{}
	_ framework.ScorePlugin          = &NodeAffinity{}
	_ framework.NormalizeScorePlugin = &NodeAffinity{}
)

// New returns the plugin.
func New() *NodeAffinity { return &NodeAffinity{} }

// Name implements framework.Plugin.
func (*NodeAffinity) Name() string { return Name }

// preFilterState is the pod's selectors, parsed once per cycle.
type preFilterState struct {
	nodeSelector map[string]string
	required     *selector // nil: no required affinity
	preferred    []weightedTerm
}

// PreFilter parses the pod's selectors; pods without nodeSelector or required affinity skip Filter.
func (*NodeAffinity) PreFilter(state *framework.CycleState, pod *framework.PodInfo) *framework.Status {
	spec := pod.Pod.GetSpec()
	na := spec.GetAffinity().GetNodeAffinity()
	s := &preFilterState{nodeSelector: spec.GetNodeSelector()}
	if na.GetRequired() != nil {
		s.required = compileSelector(na.GetRequired())
	}
	for _, p := range na.GetPreferred() {
		if p.GetWeight() == 0 || isEmptyTerm(p.GetPreference()) {
			continue
		}
		s.preferred = append(s.preferred, weightedTerm{weight: int64(p.GetWeight()), term: compileTerm(p.GetPreference())})
	}
	state.Write(stateKey, s)
	if len(s.nodeSelector) == 0 && s.required == nil {
		return statusSkip
	}
	return nil
}

func readState(state *framework.CycleState) (*preFilterState, *framework.Status) {
	return framework.ReadState[*preFilterState](state, stateKey)
}

// Filter rejects nodes that do not match the nodeSelector or the required affinity.
func (*NodeAffinity) Filter(state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) *framework.Status {
	s, st := readState(state)
	if st != nil {
		return st
	}
	labels := node.Labels
	for k, v := range s.nodeSelector {
		if lv, ok := labels[k]; !ok || lv != v {
			return statusMismatch
		}
	}
	if s.required != nil && !s.required.matches(labels, node.Name()) {
		return statusMismatch
	}
	return nil
}

// PreScore skips Score for pods without preferred terms (every node would score 0), as Kubernetes'
// NodeAffinity does.
func (*NodeAffinity) PreScore(state *framework.CycleState, _ *framework.PodInfo, _ []*framework.NodeInfo) *framework.Status {
	s, st := readState(state)
	if st != nil {
		return st
	}
	if len(s.preferred) == 0 {
		return statusSkip
	}
	return nil
}

// Score sums the weights of the preferred terms the node matches.
func (*NodeAffinity) Score(state *framework.CycleState, _ *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	s, st := readState(state)
	if st != nil {
		return 0, st
	}
	var score int64
	labels := node.Labels
	for _, t := range s.preferred {
		if t.term.matches(labels, node.Name()) {
			score += t.weight
		}
	}
	return score, nil
}

// NormalizeScore scales to 0..100 relative to the best node.
func (*NodeAffinity) NormalizeScore(_ *framework.CycleState, _ *framework.PodInfo, scores []framework.NodeScore) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, false, scores)
	return nil
}

// ---------------------------------------------------------------- selectors

// selector is a compiled NodeSelector: the terms are ORed.
type selector struct{ terms []term }

type term struct {
	exprs  []requirement
	fields []requirement
	// invalid terms (unknown operator, bad number) match nothing, as Kubernetes' lazy-error selector.
	invalid bool
}

type weightedTerm struct {
	weight int64
	term   term
}

type requirement struct {
	key    string
	op     string
	values []string
	num    int64 // Gt, Lt
}

// Operators.
const (
	opIn           = "In"
	opNotIn        = "NotIn"
	opExists       = "Exists"
	opDoesNotExist = "DoesNotExist"
	opGt           = "Gt"
	opLt           = "Lt"
	fieldNodeName  = "metadata.name"
)

func isEmptyTerm(t *pb.NodeSelectorTerm) bool {
	return len(t.GetMatchExpressions()) == 0 && len(t.GetMatchFields()) == 0
}

func compileSelector(ns *pb.NodeSelector) *selector {
	s := &selector{}
	for _, t := range ns.GetTerms() {
		if isEmptyTerm(t) { // an empty term selects nothing
			continue
		}
		s.terms = append(s.terms, compileTerm(t))
	}
	return s
}

func compileTerm(t *pb.NodeSelectorTerm) term {
	var out term
	for _, e := range t.GetMatchExpressions() {
		r, ok := compileRequirement(e)
		if !ok {
			out.invalid = true
		}
		out.exprs = append(out.exprs, r)
	}
	for _, f := range t.GetMatchFields() {
		r, ok := compileRequirement(f)
		if !ok || r.key != fieldNodeName || (r.op != opIn && r.op != opNotIn) {
			out.invalid = true
		}
		out.fields = append(out.fields, r)
	}
	return out
}

func compileRequirement(e *pb.NodeSelectorRequirement) (requirement, bool) {
	r := requirement{key: e.GetKey(), op: e.GetOperator(), values: e.GetValues()}
	switch r.op {
	case opIn, opNotIn:
		return r, len(r.values) > 0
	case opExists, opDoesNotExist:
		return r, len(r.values) == 0
	case opGt, opLt:
		if len(r.values) != 1 {
			return r, false
		}
		n, err := strconv.ParseInt(r.values[0], 10, 64)
		r.num = n
		return r, err == nil
	}
	return r, false
}

func (s *selector) matches(labels map[string]string, nodeName string) bool {
	for i := range s.terms {
		if s.terms[i].matches(labels, nodeName) {
			return true
		}
	}
	return false
}

func (t *term) matches(labels map[string]string, nodeName string) bool {
	if t.invalid {
		return false
	}
	for i := range t.exprs {
		v, ok := labels[t.exprs[i].key]
		if !t.exprs[i].matches(v, ok) {
			return false
		}
	}
	for i := range t.fields {
		if !t.fields[i].matches(nodeName, true) {
			return false
		}
	}
	return true
}

func (r *requirement) matches(v string, present bool) bool {
	switch r.op {
	case opIn:
		return present && contains(r.values, v)
	case opNotIn:
		return !present || !contains(r.values, v)
	case opExists:
		return present
	case opDoesNotExist:
		return !present
	case opGt, opLt:
		if !present {
			return false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false
		}
		if r.op == opGt {
			return n > r.num
		}
		return n < r.num
	}
	return false
}

func contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

// Required is a pod's nodeSelector and required node affinity, compiled: what other plugins (topology
// spread's nodeAffinityPolicy) ask of a node, as component-helpers' RequiredNodeAffinity.
type Required struct {
	nodeSelector map[string]string
	required     *selector
}

// GetRequired compiles pod's nodeSelector and required node affinity.
func GetRequired(pod *pb.Pod) *Required {
	r := &Required{nodeSelector: pod.GetSpec().GetNodeSelector()}
	if req := pod.GetSpec().GetAffinity().GetNodeAffinity().GetRequired(); req != nil {
		r.required = compileSelector(req)
	}
	return r
}

// Match reports whether node satisfies both.
func (r *Required) Match(node *pb.Node) bool {
	return r.MatchLabels(node.GetMetadata().GetLabels(), node.GetMetadata().GetName())
}

// Constrains reports whether r may exclude a node.
func (r *Required) Constrains() bool { return len(r.nodeSelector) > 0 || r.required != nil }

// MatchLabels is Match on a node's labels and name (a NodeInfo's, read without touching the node).
func (r *Required) MatchLabels(labels map[string]string, name string) bool {
	if !r.Constrains() {
		return true
	}
	for k, v := range r.nodeSelector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return r.required == nil || r.required.matches(labels, name)
}
