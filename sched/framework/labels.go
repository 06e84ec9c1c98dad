package framework

import (
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Label selector operators (metav1.LabelSelectorOperator).
const (
	LabelOpIn           = "In"
	LabelOpNotIn        = "NotIn"
	LabelOpExists       = "Exists"
	LabelOpDoesNotExist = "DoesNotExist"
)

// LabelNamespaceName is the label Kubernetes sets on every namespace to its own name. podbus keeps no
// namespace objects, so a namespaceSelector is matched against this one label: a selector on other
// namespace labels matches no namespace.
const LabelNamespaceName = "kubernetes.io/metadata.name"

// LabelSelector is a compiled metav1.LabelSelector. The zero value (and a nil *LabelSelector) selects
// nothing, as metav1.LabelSelectorAsSelector(nil); an empty selector ({}) selects everything.
type LabelSelector struct {
	reqs    []labelRequirement
	nothing bool
}

type labelRequirement struct {
	key, op string
	values  []string
}

// CompileLabelSelector compiles s. An invalid selector (unknown operator, In without values, Exists
// with values) selects nothing: the API server rejects such selectors, so this only guards.
func CompileLabelSelector(s *pb.LabelSelector) *LabelSelector {
	if s == nil {
		return &LabelSelector{nothing: true}
	}
	out := &LabelSelector{reqs: make([]labelRequirement, 0, len(s.GetMatchLabels())+len(s.GetMatchExpressions()))}
	for k, v := range s.GetMatchLabels() {
		out.reqs = append(out.reqs, labelRequirement{key: k, op: LabelOpIn, values: []string{v}})
	}
	for _, e := range s.GetMatchExpressions() {
		r := labelRequirement{key: e.GetKey(), op: e.GetOperator(), values: e.GetValues()}
		switch r.op {
		case LabelOpIn, LabelOpNotIn:
			if len(r.values) == 0 {
				out.nothing = true
			}
		case LabelOpExists, LabelOpDoesNotExist:
			if len(r.values) != 0 {
				out.nothing = true
			}
		default:
			out.nothing = true
		}
		out.reqs = append(out.reqs, r)
	}
	return out
}

// SelectorFromSet selects the labels equal to every entry of set (an empty set selects everything).
func SelectorFromSet(set map[string]string) *LabelSelector {
	out := &LabelSelector{}
	for k, v := range set {
		out.reqs = append(out.reqs, labelRequirement{key: k, op: LabelOpIn, values: []string{v}})
	}
	return out
}

// With returns a copy of s that also requires key In values (a nil s stays nothing).
func (s *LabelSelector) With(key string, values ...string) *LabelSelector {
	if s == nil || s.nothing {
		return &LabelSelector{nothing: true}
	}
	reqs := make([]labelRequirement, len(s.reqs), len(s.reqs)+1)
	copy(reqs, s.reqs)
	return &LabelSelector{reqs: append(reqs, labelRequirement{key: key, op: LabelOpIn, values: values})}
}

// Empty reports whether s selects everything (no requirement). Kubernetes' topology spread counts no
// pod for such a selector.
func (s *LabelSelector) Empty() bool { return s != nil && !s.nothing && len(s.reqs) == 0 }

// Matches reports whether labels satisfy every requirement.
func (s *LabelSelector) Matches(labels map[string]string) bool {
	if s == nil || s.nothing {
		return false
	}
	for i := range s.reqs {
		r := &s.reqs[i]
		v, ok := labels[r.key]
		switch r.op {
		case LabelOpIn:
			if !ok || !containsString(r.values, v) {
				return false
			}
		case LabelOpNotIn:
			if ok && containsString(r.values, v) {
				return false
			}
		case LabelOpExists:
			if !ok {
				return false
			}
		case LabelOpDoesNotExist:
			if ok {
				return false
			}
		}
	}
	return true
}

func containsString(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}
