package core

import (
	"github.com/podbus/podbus/sched/config"
	"github.com/podbus/podbus/sched/framework"
)

// ForProfile returns the algorithm of a profile.
func ForProfile(p config.Profile) (*Algorithm, error) {
	fw, err := p.Framework()
	if err != nil {
		return nil, err
	}
	return NewAlgorithm(fw, p.Percentage()), nil
}

// Simulator runs scheduling cycles exactly as a scheduler replica does (same plugins, same
// uid-seeded choices) on snapshots the caller builds, for tools that replay or re-run recorded
// decisions.
type Simulator struct {
	algo *Algorithm
}

// NewSimulator returns a simulator for the profile.
func NewSimulator(p config.Profile) (*Simulator, error) {
	if err := config.Validate([]config.Profile{p}); err != nil {
		return nil, err
	}
	algo, err := ForProfile(p)
	if err != nil {
		return nil, err
	}
	return &Simulator{algo: algo}, nil
}

// Schedule runs one cycle. Errors as the service's: framework.ErrNoNodesAvailable or a
// *framework.FitError when the pod fits nowhere, anything else is a plugin failure.
func (s *Simulator) Schedule(snap *framework.Snapshot, pod *framework.PodInfo) (Result, error) {
	return s.algo.Schedule(snap, pod)
}
