// Package resourcestrategy is the scoring half of kube-scheduler's NodeResourcesFit: its args
// (NodeResourcesFitArgs) and its scoring strategies. podbus splits NodeResourcesFit in two plugins,
// the filter (noderesources.Fit, named NodeResourcesFit) and one score plugin per strategy:
//
//	scoringStrategy.type      score plugin
//	LeastAllocated (default)  NodeResourcesLeastAllocated (noderesources)
//	MostAllocated             NodeResourcesMostAllocated  (mostallocated)
//	RequestedToCapacityRatio  NodeResourcesRequestedToCapacityRatio (this package)
//
// With the default resources (cpu and memory, weight 1 each) the first two are the plugins of their
// own packages; with other resources or weights, this package's Scorer stands in for them under the
// same name, with kube-scheduler's formula:
//
//	score = Σ_r weight_r × score_r(requested_r, allocatable_r) / Σ_r weight_r
//
// over the resources the node declares (extended resources only when the pod requests them).
package resourcestrategy

import (
	"encoding/json"
	"fmt"

	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/mostallocated"
	"github.com/podbus/podbus/sched/plugins/noderesources"
)

// Strategy types (kube-scheduler's ScoringStrategyType).
const (
	LeastAllocated           = "LeastAllocated"
	MostAllocated            = "MostAllocated"
	RequestedToCapacityRatio = "RequestedToCapacityRatio"
)

// ArgsKind is the kind of NodeResourcesFit's args.
const ArgsKind = "NodeResourcesFitArgs"

// RequestedToCapacityRatioName is the score plugin of the RequestedToCapacityRatio strategy.
const RequestedToCapacityRatioName = "NodeResourcesRequestedToCapacityRatio"

// FitArgs are kube-scheduler's NodeResourcesFitArgs.
type FitArgs struct {
	// IgnoredResources and IgnoredResourceGroups are accepted only empty: the filter checks every
	// resource.
	IgnoredResources      []string         `json:"ignoredResources,omitempty"`
	IgnoredResourceGroups []string         `json:"ignoredResourceGroups,omitempty"`
	ScoringStrategy       *ScoringStrategy `json:"scoringStrategy,omitempty"`
}

// ScoringStrategy is kube-scheduler's ScoringStrategy.
type ScoringStrategy struct {
	Type      string     `json:"type,omitempty"`
	Resources []Resource `json:"resources,omitempty"`
	// RequestedToCapacityRatio is the shape of the RequestedToCapacityRatio strategy.
	RequestedToCapacityRatio *RequestedToCapacityRatioParam `json:"requestedToCapacityRatio,omitempty"`
}

// Resource is a resource and its weight in the score.
type Resource struct {
	Name   string `json:"name"`
	Weight int64  `json:"weight"`
}

// RequestedToCapacityRatioParam is the shape: score (0..10) at given utilizations (0..100), ascending.
type RequestedToCapacityRatioParam struct {
	Shape []UtilizationShapePoint `json:"shape"`
}

// UtilizationShapePoint is one point of the shape.
type UtilizationShapePoint struct {
	Utilization int32 `json:"utilization"`
	Score       int32 `json:"score"`
}

// ParseFitArgs decodes and validates NodeResourcesFit's args and fills the defaults: LeastAllocated
// over cpu and memory, weight 1 each.
func ParseFitArgs(args json.RawMessage) (FitArgs, error) {
	var a FitArgs
	if err := framework.DecodeArgs(args, ArgsKind, &a); err != nil {
		return a, err
	}
	if len(a.IgnoredResources) > 0 || len(a.IgnoredResourceGroups) > 0 {
		return a, fmt.Errorf("%w: %s: ignoredResources and ignoredResourceGroups are not supported", framework.ErrArgs, ArgsKind)
	}
	if a.ScoringStrategy == nil {
		a.ScoringStrategy = &ScoringStrategy{}
	}
	s := a.ScoringStrategy
	if s.Type == "" {
		s.Type = LeastAllocated
	}
	if len(s.Resources) == 0 {
		s.Resources = []Resource{{Name: podutil.CPU, Weight: 1}, {Name: podutil.Memory, Weight: 1}}
	}
	seen := map[string]bool{}
	for _, r := range s.Resources {
		if r.Name == "" || seen[r.Name] {
			return a, fmt.Errorf("%w: %s: resource name %q empty or repeated", framework.ErrArgs, ArgsKind, r.Name)
		}
		seen[r.Name] = true
		if r.Weight < 1 || r.Weight > 100 {
			return a, fmt.Errorf("%w: %s: resource %s weight %d not in 1..100", framework.ErrArgs, ArgsKind, r.Name, r.Weight)
		}
	}
	switch s.Type {
	case LeastAllocated, MostAllocated:
		if s.RequestedToCapacityRatio != nil {
			return a, fmt.Errorf("%w: %s: requestedToCapacityRatio is only for type %s", framework.ErrArgs, ArgsKind, RequestedToCapacityRatio)
		}
	case RequestedToCapacityRatio:
		if err := validateShape(s.RequestedToCapacityRatio); err != nil {
			return a, err
		}
	default:
		return a, fmt.Errorf("%w: %s: scoringStrategy.type %q (want %s, %s or %s)", framework.ErrArgs, ArgsKind, s.Type, LeastAllocated, MostAllocated, RequestedToCapacityRatio)
	}
	return a, nil
}

func validateShape(p *RequestedToCapacityRatioParam) error {
	if p == nil || len(p.Shape) == 0 {
		return fmt.Errorf("%w: %s: requestedToCapacityRatio.shape is required", framework.ErrArgs, ArgsKind)
	}
	for i, pt := range p.Shape {
		if pt.Utilization < 0 || pt.Utilization > 100 || pt.Score < 0 || pt.Score > 10 {
			return fmt.Errorf("%w: %s: shape point %d: utilization must be in 0..100 and score in 0..10", framework.ErrArgs, ArgsKind, i)
		}
		if i > 0 && pt.Utilization <= p.Shape[i-1].Utilization {
			return fmt.Errorf("%w: %s: shape utilizations must ascend", framework.ErrArgs, ArgsKind)
		}
	}
	return nil
}

// ScorePluginName is the score plugin of a strategy type.
func ScorePluginName(strategy string) string {
	switch strategy {
	case MostAllocated:
		return mostallocated.Name
	case RequestedToCapacityRatio:
		return RequestedToCapacityRatioName
	}
	return noderesources.LeastAllocatedName
}

// Factory returns the factory of the score plugin of strategy: it takes NodeResourcesFitArgs whose
// type, if set, must be strategy.
func Factory(strategy string) framework.PluginFactory {
	return func(args json.RawMessage) (framework.Plugin, error) {
		var declared struct {
			ScoringStrategy struct {
				Type string `json:"type"`
			} `json:"scoringStrategy"`
		}
		if len(args) > 0 {
			_ = json.Unmarshal(args, &declared) // ParseFitArgs reports malformed args
		}
		if t := declared.ScoringStrategy.Type; t == "" && strategy == RequestedToCapacityRatio {
			// The shape must come with the type.
			return nil, fmt.Errorf("%w: %s: plugin %s needs scoringStrategy.type %s", framework.ErrArgs, ArgsKind, RequestedToCapacityRatioName, strategy)
		} else if t != "" && t != strategy {
			// The args were written for another strategy's plugin.
			return nil, fmt.Errorf("%w: %s: plugin %s scores with %s, not %s", framework.ErrArgs, ArgsKind, ScorePluginName(strategy), strategy, t)
		}
		a, err := ParseFitArgs(args)
		if err != nil {
			return nil, err
		}
		s := a.ScoringStrategy
		s.Type = strategy
		if strategy != RequestedToCapacityRatio && defaultResources(s.Resources) {
			if strategy == MostAllocated {
				return mostallocated.New(), nil
			}
			return noderesources.NewLeastAllocated(), nil
		}
		return New(*s)
	}
}

func defaultResources(rs []Resource) bool {
	return len(rs) == 2 && rs[0] == Resource{Name: podutil.CPU, Weight: 1} && rs[1] == Resource{Name: podutil.Memory, Weight: 1}
}
