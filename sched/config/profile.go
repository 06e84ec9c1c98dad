// Package config reads scheduler profiles: kube-scheduler's own KubeSchedulerConfiguration (kube.go)
// or podbus's shorter profile file (this file), told apart by apiVersion and kind. A Profile yields
// the framework registrations of its plugins (Plugins), built from the in-tree registry
// (sched/plugins).
package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins"
	"github.com/podbus/podbus/sched/plugins/mostallocated"
	"github.com/podbus/podbus/sched/plugins/noderesources"
)

// ErrConfig is returned (wrapped) for a profile or configuration file that cannot be used.
var ErrConfig = errors.New("invalid scheduler config")

// Scoring strategies of a Profile.
const (
	LeastAllocated = "LeastAllocated" // the default: spread pods over the emptiest nodes
	MostAllocated  = "MostAllocated"  // pack pods onto the fullest nodes that fit
)

// DefaultSchedulerName is the profile a pod without spec.schedulerName gets (Kubernetes' default).
const DefaultSchedulerName = "default-scheduler"

// resourceScoreAlias names the resource score plugin in weights whichever strategy is chosen: in
// kube-scheduler NodeResourcesFit itself scores (weight 1 by default).
const resourceScoreAlias = "NodeResourcesFit"

// Profile is one scheduler profile, like a kube-scheduler profile: the pods whose spec.schedulerName
// is SchedulerName are scheduled with it. The zero Profile is the default plugin set
// (plugins.DefaultPlugins) for "default-scheduler". A profile read from a KubeSchedulerConfiguration
// keeps its plugins in Kube (see kube.go); otherwise it is podbus's own form. A podbus profile file
// holds one profile (the original form) or several:
//
//	scoring: MostAllocated       # or LeastAllocated (default)
//	weights:                     # score plugin name -> weight (0 drops a score-only plugin)
//	  TaintToleration: 3
//	  NodeAffinity: 2
//	percentageOfNodesToScore: 0  # 0 adaptive (default), 1..100
//
//	percentageOfNodesToScore: 50 # default for the profiles below that do not set it
//	profiles:
//	- schedulerName: default-scheduler
//	- schedulerName: packer
//	  scoring: MostAllocated
//	  weights: {NodeResourcesFit: 5, ImageLocality: 0}
//
// Weights: TaintToleration 3, NodeAffinity 2, PodTopologySpread 2, InterPodAffinity 2, the resource
// score (NodeResourcesLeastAllocated or NodeResourcesMostAllocated, also settable as NodeResourcesFit)
// 1, NodeResourcesBalancedAllocation 1, ImageLocality 1, as kube-scheduler's defaults.
type Profile struct {
	SchedulerName string           `json:"schedulerName,omitempty"`
	Scoring       string           `json:"scoring,omitempty"`
	Weights       map[string]int64 `json:"weights,omitempty"`
	// PercentageOfNodesToScore bounds the feasible nodes searched for (see numFeasibleNodesToFind):
	// nil or 0 is adaptive, 100 all nodes.
	PercentageOfNodesToScore *int `json:"percentageOfNodesToScore,omitempty"`
	// Kube holds the plugins of a profile read from a KubeSchedulerConfiguration; Scoring and Weights
	// are then unused.
	Kube *KubeProfile `json:"-"`
}

// profileFile is the file format: a single profile inline, or a list.
type profileFile struct {
	Profile  `json:",inline"`
	Profiles []Profile `json:"profiles,omitempty"`
}

// Name is the profile's scheduler name (DefaultSchedulerName when empty).
func (p Profile) Name() string {
	if p.SchedulerName == "" {
		return DefaultSchedulerName
	}
	return p.SchedulerName
}

// Percentage is percentageOfNodesToScore (0: adaptive).
func (p Profile) Percentage() int {
	if p.PercentageOfNodesToScore == nil {
		return 0
	}
	return *p.PercentageOfNodesToScore
}

// ParseProfiles reads a YAML (or JSON) file: a KubeSchedulerConfiguration (by its apiVersion and kind)
// or a podbus profile file, either form; unknown fields are errors.
func ParseProfiles(data []byte) ([]Profile, error) {
	if isKube, err := isKubeConfig(data); err != nil {
		return nil, err
	} else if isKube {
		return parseKube(data)
	}
	var f profileFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%w: profile: %v", ErrConfig, err)
	}
	ps := []Profile{f.Profile}
	if len(f.Profiles) > 0 {
		if f.SchedulerName != "" || f.Scoring != "" || f.Weights != nil {
			return nil, fmt.Errorf("%w: profile: schedulerName, scoring and weights go inside profiles when profiles is set", ErrConfig)
		}
		ps = f.Profiles
		for i := range ps {
			if ps[i].PercentageOfNodesToScore == nil {
				ps[i].PercentageOfNodesToScore = f.PercentageOfNodesToScore
			}
		}
	}
	if err := Validate(ps); err != nil {
		return nil, err
	}
	return ps, nil
}

// Validate checks profiles meant to be served together.
func Validate(ps []Profile) error {
	seen := map[string]bool{}
	for _, p := range ps {
		if seen[p.Name()] {
			return fmt.Errorf("%w: two profiles for schedulerName %q", ErrConfig, p.Name())
		}
		seen[p.Name()] = true
		if _, err := p.Framework(); err != nil {
			return err
		}
		if pc := p.Percentage(); pc < 0 || pc > 100 {
			return fmt.Errorf("%w: profile %q: percentageOfNodesToScore %d not in 0..100", ErrConfig, p.Name(), pc)
		}
	}
	return nil
}

// ParseProfile reads a profile or configuration file and returns its one profile, or, in a file with
// several, the default-scheduler's (else the first): tools that replay decisions with one profile use
// it.
func ParseProfile(data []byte) (Profile, error) {
	ps, err := ParseProfiles(data)
	if err != nil {
		return Profile{}, err
	}
	for _, p := range ps {
		if p.Name() == DefaultSchedulerName {
			return p, nil
		}
	}
	return ps[0], nil
}

// LoadProfile reads a profile file (see ParseProfile).
func LoadProfile(path string) (Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Profile{}, fmt.Errorf("%w: read profile: %w", ErrConfig, err)
	}
	return ParseProfile(data)
}

// LoadProfiles reads a profile file with one or several profiles.
func LoadProfiles(path string) ([]Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: read profile: %w", ErrConfig, err)
	}
	return ParseProfiles(data)
}

// Plugins returns the profile's plugin set. A podbus profile: plugins.DefaultPlugins with the resource
// score plugin chosen by Scoring and the weights overridden (a weight of 0 drops a score-only plugin).
// A KubeSchedulerConfiguration profile: see KubeProfile.
func (p Profile) Plugins() ([]framework.Registration, error) {
	if p.Kube != nil {
		return p.Kube.registrations(p.Name())
	}
	regs := plugins.DefaultPlugins()
	resourceScore := noderesources.LeastAllocatedName
	switch p.Scoring {
	case "", LeastAllocated:
	case MostAllocated:
		i := slices.IndexFunc(regs, func(r framework.Registration) bool { return r.Plugin.Name() == noderesources.LeastAllocatedName })
		regs[i] = framework.Registration{Plugin: mostallocated.New(), Weight: regs[i].Weight}
		resourceScore = mostallocated.Name
	default:
		return nil, fmt.Errorf("%w: scoring %q (want %s or %s)", ErrConfig, p.Scoring, LeastAllocated, MostAllocated)
	}
	// Sorted, so that an error names the same plugin every time.
	for _, name := range slices.Sorted(maps.Keys(p.Weights)) {
		w := p.Weights[name]
		if name == resourceScoreAlias {
			name = resourceScore
		}
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

// Framework returns a framework running the profile's plugins.
func (p Profile) Framework() (*framework.Framework, error) {
	regs, err := p.Plugins()
	if err != nil {
		return nil, err
	}
	fw, err := framework.New(regs...)
	if err != nil {
		return nil, fmt.Errorf("%w: profile %q: %w", ErrConfig, p.Name(), err)
	}
	return fw, nil
}
