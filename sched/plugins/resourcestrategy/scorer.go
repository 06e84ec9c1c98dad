package resourcestrategy

import (
	"fmt"

	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/mostallocated"
	"github.com/podbus/podbus/sched/plugins/noderesources"
)

// Scorer scores nodes by a strategy over weighted resources (see the package comment). cpu and memory
// count pods without requests at the scoring defaults, as the plugins it stands in for.
type Scorer struct {
	name      string
	resources []Resource
	score     func(requested, capacity int64) int64
}

var _ framework.ScorePlugin = &Scorer{}

// New returns the scorer of s (its type and resources set; see ParseFitArgs).
func New(s ScoringStrategy) (*Scorer, error) {
	sc := &Scorer{name: ScorePluginName(s.Type), resources: s.Resources}
	switch s.Type {
	case LeastAllocated:
		sc.score = noderesources.LeastRequestedScore
	case MostAllocated:
		sc.score = mostallocated.MostRequestedScore
	case RequestedToCapacityRatio:
		if err := validateShape(s.RequestedToCapacityRatio); err != nil {
			return nil, err
		}
		sc.score = brokenLinear(s.RequestedToCapacityRatio.Shape)
	default:
		return nil, fmt.Errorf("%w: scoring strategy %q", framework.ErrArgs, s.Type)
	}
	return sc, nil
}

// Name implements framework.Plugin.
func (s *Scorer) Name() string { return s.name }

// Score implements framework.ScorePlugin.
func (s *Scorer) Score(_ *framework.CycleState, pod *framework.PodInfo, node *framework.NodeInfo) (int64, *framework.Status) {
	var sum, weights int64
	for _, r := range s.resources {
		var requested, capacity int64
		switch r.Name {
		case podutil.CPU:
			requested, capacity = node.NonZeroMilliCPU+pod.NonZeroMilliCPU, node.Allocatable.MilliCPU
		case podutil.Memory:
			requested, capacity = node.NonZeroMemory+pod.NonZeroMemory, node.Allocatable.Memory
		case podutil.EphemeralStorage:
			requested, capacity = node.Requested.EphemeralStorage+pod.Request.EphemeralStorage, node.Allocatable.EphemeralStorage
		default:
			want, ok := pod.Request.Scalar[r.Name]
			if !ok || want == 0 {
				continue // a pod that asks none of an extended resource is not steered by it
			}
			requested, capacity = node.Requested.Scalar[r.Name]+want, node.Allocatable.Scalar[r.Name]
		}
		if capacity == 0 {
			continue
		}
		sum += s.score(requested, capacity) * r.Weight
		weights += r.Weight
	}
	if weights == 0 {
		return 0, nil
	}
	return sum / weights, nil
}

// brokenLinear maps utilization (requested/capacity, 0..100) through the shape, whose scores 0..10
// scale to 0..MaxNodeScore, interpolating linearly between points and flat beyond the ends.
func brokenLinear(shape []UtilizationShapePoint) func(requested, capacity int64) int64 {
	const scale = framework.MaxNodeScore / 10
	return func(requested, capacity int64) int64 {
		u := min(requested*100/capacity, 100)
		if u <= int64(shape[0].Utilization) {
			return int64(shape[0].Score) * scale
		}
		for i := 1; i < len(shape); i++ {
			p0, p1 := shape[i-1], shape[i]
			if u <= int64(p1.Utilization) {
				s0, s1 := int64(p0.Score)*scale, int64(p1.Score)*scale
				return s0 + (s1-s0)*(u-int64(p0.Utilization))/int64(p1.Utilization-p0.Utilization)
			}
		}
		return int64(shape[len(shape)-1].Score) * scale
	}
}
