package config

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins"
	"github.com/podbus/podbus/sched/plugins/resourcestrategy"
)

const kubeHeader = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"

// plugin is a registration as the tests compare it: name, weight (score plugins), points it runs at.
type plugin struct {
	Name   string
	Weight int64
	Points framework.ExtensionPoint
}

func pluginSet(t *testing.T, regs []framework.Registration) []plugin {
	t.Helper()
	var out []plugin
	for _, r := range regs {
		p := plugin{Name: r.Plugin.Name(), Points: r.Enabled()}
		if p.Points&framework.ScorePoint != 0 {
			p.Weight = max(r.Weight, 1)
		}
		out = append(out, p)
	}
	return out
}

// defaults is the default profile's plugin set, edited by edit.
func defaults(t *testing.T, edit func([]plugin) []plugin) []plugin {
	ps := pluginSet(t, plugins.DefaultPlugins())
	if edit != nil {
		ps = edit(ps)
	}
	return ps
}

func find(ps []plugin, name string) int {
	for i, p := range ps {
		if p.Name == name {
			return i
		}
	}
	panic("no plugin " + name)
}

func without(ps []plugin, names ...string) []plugin {
	for _, n := range names {
		i := find(ps, n)
		ps = append(ps[:i:i], ps[i+1:]...)
	}
	return ps
}

func TestKubeSchedulerConfiguration(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		profile string // the profile to check (default-scheduler when empty)
		want    []plugin
		pct     int
	}{
		{"no profiles: the default", kubeHeader, "", defaults(t, nil), 0},
		{"fields podbus does not use", kubeHeader + `
leaderElection: {leaderElect: true, resourceNamespace: kube-system}
clientConnection: {kubeconfig: /etc/kubernetes/scheduler.conf, qps: 50}
parallelism: 16
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 10
enableProfiling: true
profiles:
- schedulerName: default-scheduler
  plugins:
    queueSort: {enabled: [{name: PrioritySort}]}
    bind: {enabled: [{name: DefaultBinder}]}
    filter: {enabled: [{name: VolumeBinding}, {name: NodePorts}]}
`, "", defaults(t, nil), 0},
		{"TaintToleration score disabled", kubeHeader + `
profiles:
- plugins:
    score:
      disabled: [{name: TaintToleration}]
`, "", defaults(t, func(ps []plugin) []plugin {
			i := find(ps, "TaintToleration")
			ps[i].Points, ps[i].Weight = framework.FilterPoint, 0
			return ps
		}), 0},
		{"ImageLocality disabled everywhere", kubeHeader + `
profiles:
- plugins:
    multiPoint:
      disabled: [{name: ImageLocality}]
`, "", defaults(t, func(ps []plugin) []plugin { return without(ps, "ImageLocality") }), 0},
		{"weights", kubeHeader + `
profiles:
- plugins:
    score:
      enabled: [{name: NodeAffinity, weight: 5}, {name: NodeResourcesFit, weight: 4}]
`, "", defaults(t, func(ps []plugin) []plugin {
			ps[find(ps, "NodeAffinity")].Weight = 5
			ps[find(ps, "NodeResourcesLeastAllocated")].Weight = 4
			return ps
		}), 0},
		{"MostAllocated", kubeHeader + `
profiles:
- schedulerName: packer
  pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
`, "packer", defaults(t, func(ps []plugin) []plugin {
			ps[find(ps, "NodeResourcesLeastAllocated")].Name = "NodeResourcesMostAllocated"
			return ps
		}), 0},
		{"NodeResourcesFit score disabled keeps its filter", kubeHeader + `
profiles:
- plugins:
    score:
      disabled: [{name: NodeResourcesFit}]
`, "", defaults(t, func(ps []plugin) []plugin { return without(ps, "NodeResourcesLeastAllocated") }), 0},
		{"every default disabled but a few", kubeHeader + `
profiles:
- plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit, weight: 2}, {name: TaintToleration}]
      disabled: [{name: "*"}]
`, "", []plugin{
			{Name: "NodeReady", Points: framework.FilterPoint},
			{Name: "TaintToleration", Weight: 3, Points: defaults(t, nil)[find(defaults(t, nil), "TaintToleration")].Points},
			{Name: "NodeResourcesFit", Points: defaults(t, nil)[find(defaults(t, nil), "NodeResourcesFit")].Points},
			{Name: "NodeResourcesLeastAllocated", Weight: 2, Points: framework.ScorePoint},
		}, 0},
		{"score disabled *, one enabled", kubeHeader + `
profiles:
- plugins:
    score:
      disabled: [{name: "*"}]
      enabled: [{name: ImageLocality, weight: 7}]
`, "", defaults(t, func(ps []plugin) []plugin {
			var out []plugin
			for _, p := range ps {
				switch {
				case p.Name == "ImageLocality":
					p.Weight = 7
				case p.Points&framework.ScorePoint != 0:
					p.Points &^= framework.ScorePoint | framework.PreScorePoint
					p.Weight = 0
				}
				if p.Points != 0 {
					out = append(out, p)
				}
			}
			return out
		}), 0},
		{"non-default plugin enabled", kubeHeader + `
profiles:
- plugins:
    score:
      enabled: [{name: NodeResourcesMostAllocated, weight: 2}]
`, "", func() []plugin {
			ps := defaults(t, nil)
			i := find(ps, "NodeResourcesLeastAllocated")
			return append(append(ps[:i+1:i+1], plugin{Name: "NodeResourcesMostAllocated", Weight: 2, Points: framework.ScorePoint}), ps[i+1:]...)
		}(), 0},
		{"percentage at the top", kubeHeader + "percentageOfNodesToScore: 30\n", "", defaults(t, nil), 30},
		{"percentage per profile wins", kubeHeader + "percentageOfNodesToScore: 30\nprofiles:\n- percentageOfNodesToScore: 70\n", "", defaults(t, nil), 70},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := ParseProfiles([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			name := tt.profile
			if name == "" {
				name = DefaultSchedulerName
			}
			var p *Profile
			for i := range ps {
				if ps[i].Name() == name {
					p = &ps[i]
				}
			}
			if p == nil {
				t.Fatalf("no profile %q in %d", name, len(ps))
			}
			regs, err := p.Plugins()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, pluginSet(t, regs)); diff != "" {
				t.Errorf("plugins (-want +got):\n%s", diff)
			}
			if got := p.Percentage(); got != tt.pct {
				t.Errorf("percentage = %d, want %d", got, tt.pct)
			}
			if _, err := p.Framework(); err != nil {
				t.Errorf("framework: %v", err)
			}
		})
	}
}

func TestKubeSchedulerConfigurationErrors(t *testing.T) {
	tests := []struct {
		name     string
		yaml     string
		wantArgs bool // the error is also framework.ErrArgs
	}{
		{"wrong apiVersion", "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n", false},
		{"wrong kind", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: Pod\n", false},
		{"unknown field", kubeHeader + "percentageOfNodesToScor: 3\n", false},
		{"unknown plugin", kubeHeader + "profiles:\n- plugins:\n    score:\n      enabled: [{name: Nope}]\n", false},
		{"unknown plugin disabled", kubeHeader + "profiles:\n- plugins:\n    multiPoint:\n      disabled: [{name: Nope}]\n", false},
		{"args for an unknown plugin", kubeHeader + "profiles:\n- pluginConfig:\n  - name: Nope\n    args: {}\n", false},
		{"score for a filter", kubeHeader + "profiles:\n- plugins:\n    score:\n      enabled: [{name: NodeName}]\n", false},
		{"bad strategy", kubeHeader + "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: Random}}\n", true},
		{"bad resource weight", kubeHeader + "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {resources: [{name: cpu, weight: 0}]}}\n", true},
		{"unknown args field", kubeHeader + "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategi: {}}\n", true},
		{"args of another kind", kubeHeader + "profiles:\n- pluginConfig:\n  - name: TaintToleration\n    args: {kind: NodeResourcesFitArgs}\n", true},
		{"ratio without a shape", kubeHeader + "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: RequestedToCapacityRatio}}\n", true},
		{"filter without its preFilter", kubeHeader + "profiles:\n- plugins:\n    preFilter:\n      disabled: [{name: NodeAffinity}]\n", false},
		{"two profiles, one name", kubeHeader + "profiles:\n- schedulerName: a\n- schedulerName: a\n", false},
		{"percentage out of range", kubeHeader + "percentageOfNodesToScore: 101\n", false},
		{"extenders", kubeHeader + "extenders:\n- urlPrefix: http://x\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseProfiles([]byte(tt.yaml))
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("err = %v, want ErrConfig", err)
			}
			if got := errors.Is(err, framework.ErrArgs); got != tt.wantArgs {
				t.Errorf("ErrArgs = %v, want %v (%v)", got, tt.wantArgs, err)
			}
		})
	}
}

// The example configuration parses: two profiles, the second packing with weighted resources.
func TestExampleKubeSchedulerConfig(t *testing.T) {
	data, err := os.ReadFile("../../examples/kube-scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ParseProfiles(data)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, p := range ps {
		if p.Kube == nil {
			t.Errorf("profile %s not read as a KubeSchedulerConfiguration", p.Name())
		}
		regs, err := p.Plugins()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range regs {
			if _, isScorer := r.Plugin.(*resourcestrategy.Scorer); isScorer || r.Plugin.Name() == "NodeResourcesLeastAllocated" || r.Plugin.Name() == "NodeResourcesMostAllocated" {
				names[p.Name()] = r.Plugin.Name()
			}
		}
	}
	want := map[string]string{DefaultSchedulerName: "NodeResourcesLeastAllocated", "bin-packing-scheduler": "NodeResourcesMostAllocated"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("resource score per profile (-want +got):\n%s", diff)
	}
}

// The podbus profile file still parses as itself, not as a KubeSchedulerConfiguration.
func TestPodbusProfileFileIsNotKube(t *testing.T) {
	data, err := os.ReadFile("../../examples/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ParseProfiles(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Kube != nil {
			t.Errorf("profile %s read as kube", p.Name())
		}
	}
}
