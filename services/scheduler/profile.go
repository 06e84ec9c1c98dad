package scheduler

import (
	"fmt"
	"os"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/podbus/podbus/services/scheduler/framework"
	"github.com/podbus/podbus/services/scheduler/plugins/mostallocated"
	"github.com/podbus/podbus/services/scheduler/plugins/noderesources"
)

// Scoring strategies of a Profile.
const (
	LeastAllocated = "LeastAllocated" // the default: spread pods over the emptiest nodes
	MostAllocated  = "MostAllocated"  // pack pods onto the fullest nodes that fit
)

// Profile changes the scheduler's scoring, like a kube-scheduler profile. The zero Profile is the
// default plugin set (DefaultPlugins). As YAML:
//
//	scoring: MostAllocated       # or LeastAllocated (default)
//	weights:                     # score plugin name -> weight (0 drops a score-only plugin)
//	  TaintToleration: 3
//	  NodeAffinity: 2
type Profile struct {
	Scoring string           `json:"scoring,omitempty"`
	Weights map[string]int64 `json:"weights,omitempty"`
}

// ParseProfile reads a YAML (or JSON) profile; unknown fields are errors.
func ParseProfile(data []byte) (Profile, error) {
	var p Profile
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return Profile{}, fmt.Errorf("%w: profile: %v", ErrConfig, err)
	}
	if _, err := p.Plugins(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// LoadProfile reads a profile file.
func LoadProfile(path string) (Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, fmt.Errorf("read profile: %w", err)
	}
	return ParseProfile(data)
}

// Plugins returns the profile's plugin set: DefaultPlugins with the resource score plugin chosen by
// Scoring and the weights overridden. A weight of 0 drops a score-only plugin.
func (p Profile) Plugins() ([]framework.Registration, error) {
	regs := DefaultPlugins()
	switch p.Scoring {
	case "", LeastAllocated:
	case MostAllocated:
		i := slices.IndexFunc(regs, func(r framework.Registration) bool { return r.Plugin.Name() == noderesources.LeastAllocatedName })
		regs[i] = framework.Registration{Plugin: mostallocated.New(), Weight: regs[i].Weight}
	default:
		return nil, fmt.Errorf("%w: scoring %q (want %s or %s)", ErrConfig, p.Scoring, LeastAllocated, MostAllocated)
	}
	for name, w := range p.Weights {
		i := slices.IndexFunc(regs, func(r framework.Registration) bool { return r.Plugin.Name() == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: weight for unknown plugin %q", ErrConfig, name)
		}
		if _, ok := regs[i].Plugin.(framework.ScorePlugin); !ok {
			return nil, fmt.Errorf("%w: plugin %q does not score", ErrConfig, name)
		}
		if w < 0 {
			return nil, fmt.Errorf("%w: plugin %q has negative weight %d", ErrConfig, name, w)
		}
		if w == 0 {
			// A score-only plugin is dropped; one that also filters cannot lose its score alone.
			if _, filters := regs[i].Plugin.(framework.FilterPlugin); filters {
				return nil, fmt.Errorf("%w: plugin %q also filters: its weight must be at least 1", ErrConfig, name)
			}
			regs = slices.Delete(regs, i, i+1)
			continue
		}
		regs[i].Weight = w
	}
	return regs, nil
}

// Simulator runs scheduling cycles exactly as a replica does (same plugins, same uid-seeded choices)
// on snapshots the caller builds, for tools that replay or re-run recorded decisions.
type Simulator struct {
	algo *algorithm
}

// NewSimulator returns a simulator for the profile.
func NewSimulator(p Profile) (*Simulator, error) {
	regs, err := p.Plugins()
	if err != nil {
		return nil, err
	}
	fw, err := framework.New(regs...)
	if err != nil {
		return nil, err
	}
	return &Simulator{algo: newAlgorithm(fw)}, nil
}

// Result is the outcome of one simulated cycle that found a node.
type Result struct {
	Node      string
	Score     int64
	Evaluated int // nodes filtered
	Feasible  int // nodes that passed every filter
}

// Schedule runs one cycle. Errors as the service's: framework.ErrNoNodesAvailable or a
// *framework.FitError when the pod fits nowhere, anything else is a plugin failure.
func (s *Simulator) Schedule(snap *framework.Snapshot, pod *framework.PodInfo) (Result, error) {
	r, err := s.algo.schedule(snap, pod)
	return Result{Node: r.node, Score: r.score, Evaluated: r.evaluated, Feasible: r.feasible}, err
}
