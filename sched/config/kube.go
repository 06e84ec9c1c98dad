package config

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins"
	"github.com/podbus/podbus/sched/plugins/noderesources"
	"github.com/podbus/podbus/sched/plugins/resourcestrategy"
)

// kube-scheduler's configuration type.
const (
	KubeAPIVersion = "kubescheduler.config.k8s.io/v1"
	KubeKind       = "KubeSchedulerConfiguration"
)

// KubeSchedulerConfiguration is the part of kube-scheduler's configuration (v1) podbus reads. Fields
// about running a kube-scheduler process (leader election, client connection, profiling, back-off,
// parallelism) are accepted and ignored; extenders are refused (podbus calls none).
type KubeSchedulerConfiguration struct {
	APIVersion                string          `json:"apiVersion"`
	Kind                      string          `json:"kind"`
	PercentageOfNodesToScore  *int            `json:"percentageOfNodesToScore,omitempty"`
	Profiles                  []KubeProfile   `json:"profiles,omitempty"`
	Extenders                 []any           `json:"extenders,omitempty"`
	Parallelism               json.RawMessage `json:"parallelism,omitempty"`
	LeaderElection            json.RawMessage `json:"leaderElection,omitempty"`
	ClientConnection          json.RawMessage `json:"clientConnection,omitempty"`
	HealthzBindAddress        json.RawMessage `json:"healthzBindAddress,omitempty"`
	MetricsBindAddress        json.RawMessage `json:"metricsBindAddress,omitempty"`
	EnableProfiling           json.RawMessage `json:"enableProfiling,omitempty"`
	EnableContentionProfiling json.RawMessage `json:"enableContentionProfiling,omitempty"`
	PodInitialBackoffSeconds  json.RawMessage `json:"podInitialBackoffSeconds,omitempty"`
	PodMaxBackoffSeconds      json.RawMessage `json:"podMaxBackoffSeconds,omitempty"`
	DelayCacheUntilActive     json.RawMessage `json:"delayCacheUntilActive,omitempty"`
}

// KubeProfile is a KubeSchedulerProfile. Its plugin set starts from podbus's default profile (the
// defaults kube-scheduler has and podbus implements, same order and weights) and applies Plugins as
// kube-scheduler does: multiPoint first, then each extension point; disabled "*" drops every default
// plugin there (but not podbus's NodeReady, which stands in for the node lifecycle controller's
// not-ready taint: it goes only when named); enabled turns a plugin on (score: with its weight).
// Plugins always run in the registry's order (sched/plugins), whatever order the lists give.
//
// Names map onto podbus's plugins like this:
//
//   - NodeResourcesFit is two plugins in podbus. At preFilter and filter it is the filter
//     noderesources.Fit; at preScore and score it is the score plugin of its args' scoring strategy:
//     LeastAllocated (the default) NodeResourcesLeastAllocated, MostAllocated
//     NodeResourcesMostAllocated, RequestedToCapacityRatio NodeResourcesRequestedToCapacityRatio
//     (see resourcestrategy). Its weight is that score plugin's; multiPoint means both.
//   - kube-scheduler's plugins for things podbus pods do not have (volumes, host ports, scheduling
//     gates, DRA) or that podbus does elsewhere (queue sort, binding) are accepted and ignored.
//   - the other names are the registry's (kube-scheduler's where podbus has the plugin); any other
//     name is an error.
//
// Extension points podbus does not run (preEnqueue, queueSort, permit, preBind, bind, postBind)
// are checked for names and otherwise ignored.
type KubeProfile struct {
	SchedulerName            string             `json:"schedulerName,omitempty"`
	PercentageOfNodesToScore *int               `json:"percentageOfNodesToScore,omitempty"`
	Plugins                  *KubePlugins       `json:"plugins,omitempty"`
	PluginConfig             []KubePluginConfig `json:"pluginConfig,omitempty"`
}

// KubePlugins lists the plugins per extension point.
type KubePlugins struct {
	PreEnqueue KubePluginSet `json:"preEnqueue,omitempty"`
	QueueSort  KubePluginSet `json:"queueSort,omitempty"`
	PreFilter  KubePluginSet `json:"preFilter,omitempty"`
	Filter     KubePluginSet `json:"filter,omitempty"`
	PostFilter KubePluginSet `json:"postFilter,omitempty"`
	PreScore   KubePluginSet `json:"preScore,omitempty"`
	Score      KubePluginSet `json:"score,omitempty"`
	Reserve    KubePluginSet `json:"reserve,omitempty"`
	Permit     KubePluginSet `json:"permit,omitempty"`
	PreBind    KubePluginSet `json:"preBind,omitempty"`
	Bind       KubePluginSet `json:"bind,omitempty"`
	PostBind   KubePluginSet `json:"postBind,omitempty"`
	MultiPoint KubePluginSet `json:"multiPoint,omitempty"`
}

// KubePluginSet enables and disables plugins at one extension point.
type KubePluginSet struct {
	Enabled  []KubePlugin `json:"enabled,omitempty"`
	Disabled []KubePlugin `json:"disabled,omitempty"`
}

// KubePlugin names a plugin; Weight is for score plugins (0: the default weight).
type KubePlugin struct {
	Name   string `json:"name"`
	Weight *int32 `json:"weight,omitempty"`
}

// KubePluginConfig is one plugin's args.
type KubePluginConfig struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// kubeOnly are kube-scheduler's in-tree plugins with no counterpart in podbus.
var kubeOnly = map[string]bool{
	"PrioritySort": true, "SchedulingGates": true, "DefaultBinder": true, "NodePorts": true,
	"VolumeRestrictions": true, "NodeVolumeLimits": true, "VolumeBinding": true, "VolumeZone": true,
	"EBSLimits": true, "GCEPDLimits": true, "AzureDiskLimits": true, "CinderLimits": true,
	"DynamicResources": true,
}

// isKubeConfig reports whether data is a KubeSchedulerConfiguration.
func isKubeConfig(data []byte) (bool, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return false, fmt.Errorf("%w: profile: %v", ErrConfig, err)
	}
	switch {
	case tm.APIVersion == "" && tm.Kind == "":
		return false, nil
	case tm.Kind != KubeKind:
		return false, fmt.Errorf("%w: kind %q, want %s", ErrConfig, tm.Kind, KubeKind)
	case tm.APIVersion != KubeAPIVersion:
		return false, fmt.Errorf("%w: %s apiVersion %q, want %s", ErrConfig, KubeKind, tm.APIVersion, KubeAPIVersion)
	}
	return true, nil
}

func parseKube(data []byte) ([]Profile, error) {
	var c KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrConfig, KubeKind, err)
	}
	if len(c.Extenders) > 0 {
		return nil, fmt.Errorf("%w: %s: extenders are not supported", ErrConfig, KubeKind)
	}
	kps := c.Profiles
	if len(kps) == 0 {
		kps = []KubeProfile{{}}
	}
	ps := make([]Profile, len(kps))
	for i := range kps {
		kp := kps[i]
		pc := kp.PercentageOfNodesToScore
		if pc == nil {
			pc = c.PercentageOfNodesToScore
		}
		ps[i] = Profile{SchedulerName: kp.SchedulerName, PercentageOfNodesToScore: pc, Kube: &kp}
	}
	if err := Validate(ps); err != nil {
		return nil, err
	}
	return ps, nil
}

// slot is one registry plugin's state while a profile's lists are applied.
type slot struct {
	multi   bool // enabled at every point it implements
	on, off framework.ExtensionPoint
	weight  int64
}

// registrations builds the profile's plugin set (see KubeProfile).
func (kp *KubeProfile) registrations(profile string) ([]framework.Registration, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: profile %q: %s", ErrConfig, profile, fmt.Sprintf(format, a...))
	}
	args := map[string]json.RawMessage{}
	for _, pc := range kp.PluginConfig {
		if _, dup := args[pc.Name]; dup {
			return nil, fail("pluginConfig for %s given twice", pc.Name)
		}
		if _, ok := plugins.Lookup(pc.Name); !ok && !kubeOnly[pc.Name] {
			return nil, fail("pluginConfig for unknown plugin %q", pc.Name)
		}
		args[pc.Name] = pc.Args
	}
	fitArgs, err := resourcestrategy.ParseFitArgs(args[noderesources.FitName])
	if err != nil {
		return nil, fmt.Errorf("%w: profile %q: %w", ErrConfig, profile, err)
	}
	scoreName := resourcestrategy.ScorePluginName(fitArgs.ScoringStrategy.Type)
	if _, own := args[scoreName]; !own {
		args[scoreName] = args[noderesources.FitName]
	}

	slots := map[string]*slot{}
	implicit := map[string]bool{}
	for _, e := range plugins.InTree() {
		implicit[e.Name] = e.Implicit
		if !e.Default {
			continue
		}
		name := e.Name
		if name == noderesources.LeastAllocatedName {
			name = scoreName // the default resource score follows the strategy
		}
		slots[name] = &slot{multi: true, weight: e.Weight}
	}
	get := func(name string) *slot {
		if slots[name] == nil {
			e, _ := plugins.Lookup(name)
			slots[name] = &slot{weight: e.Weight}
		}
		return slots[name]
	}
	// resolve maps a configured name at the points pt onto registry names.
	resolve := func(name string, pt framework.ExtensionPoint) ([]string, error) {
		switch {
		case name == noderesources.FitName:
			var out []string
			if pt&(framework.PreFilterPoint|framework.FilterPoint) != 0 {
				out = append(out, noderesources.FitName)
			}
			if pt&(framework.PreScorePoint|framework.ScorePoint) != 0 {
				out = append(out, scoreName)
			}
			return out, nil
		case kubeOnly[name]:
			return nil, nil
		}
		if _, ok := plugins.Lookup(name); !ok {
			return nil, fail("unknown plugin %q", name)
		}
		return []string{name}, nil
	}
	const all = framework.PreFilterPoint | framework.FilterPoint | framework.PostFilterPoint |
		framework.PreScorePoint | framework.ScorePoint | framework.ReservePoint

	ps := kp.Plugins
	if ps == nil {
		ps = &KubePlugins{}
	}
	// multiPoint first, then the extension points, as kube-scheduler.
	for _, d := range ps.MultiPoint.Disabled {
		if d.Name == "*" {
			for name, s := range slots {
				if !implicit[name] {
					s.multi = false
				}
			}
			continue
		}
		names, err := resolve(d.Name, all)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			get(n).multi = false
		}
	}
	for _, e := range ps.MultiPoint.Enabled {
		names, err := resolve(e.Name, all)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			s := get(n)
			s.multi = true
			if e.Weight != nil && *e.Weight > 0 {
				s.weight = int64(*e.Weight)
			}
		}
	}
	points := []struct {
		set KubePluginSet
		pt  framework.ExtensionPoint // 0: a point podbus does not run
	}{
		{ps.PreEnqueue, 0}, {ps.QueueSort, 0}, {ps.PreFilter, framework.PreFilterPoint},
		{ps.Filter, framework.FilterPoint}, {ps.PostFilter, framework.PostFilterPoint},
		{ps.PreScore, framework.PreScorePoint}, {ps.Score, framework.ScorePoint},
		{ps.Reserve, framework.ReservePoint}, {ps.Permit, 0}, {ps.PreBind, 0}, {ps.Bind, 0}, {ps.PostBind, 0},
	}
	for _, p := range points {
		for _, d := range p.set.Disabled {
			if d.Name == "*" {
				for name, s := range slots {
					if !implicit[name] {
						s.off |= p.pt
						s.on &^= p.pt
					}
				}
				continue
			}
			names, err := resolve(d.Name, p.pt)
			if err != nil {
				return nil, err
			}
			for _, n := range names {
				s := get(n)
				s.off |= p.pt
				s.on &^= p.pt
			}
		}
		for _, e := range p.set.Enabled {
			names, err := resolve(e.Name, p.pt)
			if err != nil {
				return nil, err
			}
			for _, n := range names {
				s := get(n)
				s.on |= p.pt
				s.off &^= p.pt
				if p.pt == framework.ScorePoint && e.Weight != nil && *e.Weight > 0 {
					s.weight = int64(*e.Weight)
				}
			}
		}
	}

	var regs []framework.Registration
	for _, e := range plugins.InTree() {
		s := slots[e.Name]
		a, configured := args[e.Name]
		if s == nil && !configured {
			continue
		}
		p, err := e.New(a)
		if err != nil {
			return nil, fmt.Errorf("%w: profile %q: %w", ErrConfig, profile, err)
		}
		if s == nil {
			continue // args checked, plugin not enabled
		}
		impl := framework.Points(p)
		if extra := s.on &^ impl; extra != 0 {
			return nil, fail("plugin %s is enabled at an extension point it does not implement", e.Name)
		}
		on := s.on
		if s.multi {
			on |= impl &^ s.off
		}
		r := framework.Registration{Plugin: p, Weight: s.weight, Disabled: impl &^ on}
		if r.Enabled() == 0 {
			continue // e.g. a score plugin whose score is disabled: its preScore serves nothing
		}
		regs = append(regs, r)
	}
	return regs, nil
}
