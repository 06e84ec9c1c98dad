package framework

import pb "github.com/podbus/podbus/proto/podbusv1"

// Taint effects and toleration operators.
const (
	TaintEffectNoSchedule       = "NoSchedule"
	TaintEffectPreferNoSchedule = "PreferNoSchedule"
	TaintEffectNoExecute        = "NoExecute"
	TolerationOpExists          = "Exists"
	TolerationOpEqual           = "Equal"
)

// ToleratesTaint reports whether t tolerates taint, as Kubernetes' Toleration.ToleratesTaint: an empty
// effect matches every effect, an empty key with Exists matches every key, an empty operator is Equal.
func ToleratesTaint(t *pb.Toleration, taint *pb.Taint) bool {
	if t.GetEffect() != "" && t.GetEffect() != taint.GetEffect() {
		return false
	}
	if t.GetKey() != "" && t.GetKey() != taint.GetKey() {
		return false
	}
	switch t.GetOperator() {
	case "", TolerationOpEqual:
		return t.GetValue() == taint.GetValue()
	case TolerationOpExists:
		return true
	}
	return false
}

// TolerationsTolerateTaint reports whether any of tolerations tolerates taint.
func TolerationsTolerateTaint(tolerations []*pb.Toleration, taint *pb.Taint) bool {
	for _, t := range tolerations {
		if ToleratesTaint(t, taint) {
			return true
		}
	}
	return false
}

// DefaultNormalizeScore scales scores to [0, maxPriority] relative to the highest one, and with
// reverse flips them (a high raw score becomes a low final score), as Kubernetes' helper does.
func DefaultNormalizeScore(maxPriority int64, reverse bool, scores []NodeScore) {
	var maxCount int64
	for i := range scores {
		maxCount = max(maxCount, scores[i].Score)
	}
	if maxCount == 0 {
		if reverse {
			for i := range scores {
				scores[i].Score = maxPriority
			}
		}
		return
	}
	for i := range scores {
		s := maxPriority * scores[i].Score / maxCount
		if reverse {
			s = maxPriority - s
		}
		scores[i].Score = s
	}
}
