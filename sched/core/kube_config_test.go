package core

import (
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/config"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const kubeHeader = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"

// A KubeSchedulerConfiguration changes decisions: each row places one pod on a small cluster with
// the default configuration and with the row's, and expects a different node from each.
func TestKubeConfigChangesDecision(t *testing.T) {
	half := &pb.Resources{MilliCpu: 2000, Memory: 4 << 30, Pods: 2}
	// "tainted" is the emptier node, but its PreferNoSchedule taint outweighs that by default.
	tainted := []*framework.NodeInfo{
		st.Node("tainted").Capacity("4", "8Gi", 110).Ready().Taint("k", "v", "PreferNoSchedule").Info(),
		st.Node("clean").Capacity("4", "8Gi", 110).Ready().InfoRequested(half),
	}
	// cpu-busy is fuller by cpu (and on average), mem-busy by memory.
	skewed := []*framework.NodeInfo{
		st.Node("cpu-busy").Capacity("4", "8Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 3000, Memory: 1 << 30, Pods: 1}),
		st.Node("mem-busy").Capacity("4", "8Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 500, Memory: 5 << 30, Pods: 1}),
	}
	tests := []struct {
		name        string
		yaml        string
		nodes       []*framework.NodeInfo
		pod         *framework.PodInfo
		defaultNode string
		configNode  string
	}{
		{"TaintToleration score disabled", kubeHeader + `
profiles:
- plugins:
    score:
      disabled: [{name: TaintToleration}]
`, tainted, st.Pod("p", "u1").Req("500m", "1Gi").Info(), "clean", "tainted"},
		{"resource score weighs more", kubeHeader + `
profiles:
- plugins:
    score:
      enabled: [{name: NodeResourcesFit, weight: 10}]
`, tainted, st.Pod("p", "u1").Req("500m", "1Gi").Info(), "clean", "tainted"},
		{"ImageLocality disabled", kubeHeader + `
profiles:
- plugins:
    multiPoint:
      disabled: [{name: ImageLocality}]
`, []*framework.NodeInfo{
			st.Node("cached").Capacity("4", "8Gi", 110).Ready().Image(800<<20, "registry.example/app:1").InfoRequested(&pb.Resources{MilliCpu: 500, Memory: 1 << 30, Pods: 1}),
			st.Node("empty").Capacity("4", "8Gi", 110).Ready().Info(),
		}, st.Pod("p", "u1").Req("500m", "1Gi").Image("registry.example/app:1").Info(), "cached", "empty"},
		{"MostAllocated", kubeHeader + `
profiles:
- pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
`, []*framework.NodeInfo{
			st.Node("busy").Capacity("4", "8Gi", 110).Ready().InfoRequested(half),
			st.Node("idle").Capacity("4", "8Gi", 110).Ready().Info(),
		}, st.Pod("p", "u1").Req("500m", "1Gi").Info(), "idle", "busy"},
		{"MostAllocated on memory alone", kubeHeader + `
profiles:
- pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: memory, weight: 1}]
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
`, skewed, st.Pod("p", "u1").Req("100m", "100Mi").Info(), "", "mem-busy"},
		{"MostAllocated on cpu and memory", kubeHeader + `
profiles:
- pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
`, skewed, st.Pod("p", "u1").Req("100m", "100Mi").Info(), "", "cpu-busy"},
		{"RequestedToCapacityRatio", kubeHeader + `
profiles:
- pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: RequestedToCapacityRatio
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
        requestedToCapacityRatio:
          shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]
`, []*framework.NodeInfo{
			st.Node("busy").Capacity("4", "8Gi", 110).Ready().InfoRequested(half),
			st.Node("idle").Capacity("4", "8Gi", 110).Ready().Info(),
		}, st.Pod("p", "u1").Req("500m", "1Gi").Info(), "idle", "busy"},
	}
	def, err := NewSimulator(config.Profile{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := config.ParseProfile([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			sim, err := NewSimulator(p)
			if err != nil {
				t.Fatal(err)
			}
			snap := framework.SnapshotOf(tt.nodes...)
			if tt.defaultNode != "" {
				got, err := def.Schedule(snap, tt.pod)
				if err != nil {
					t.Fatal(err)
				}
				if got.Node != tt.defaultNode {
					t.Errorf("default configuration chose %s, want %s", got.Node, tt.defaultNode)
				}
			}
			got, err := sim.Schedule(snap, tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got.Node != tt.configNode {
				t.Errorf("configuration chose %s, want %s", got.Node, tt.configNode)
			}
		})
	}
}

// The cycle names the plugins that rejected the pod, for the requeue.
func TestFitErrorNamesRejectingPlugins(t *testing.T) {
	a := testAlgorithm(t)
	snap := framework.SnapshotOf(
		st.Node("full").Capacity("1", "1Gi", 110).Ready().Info(),
		st.Node("tainted").Capacity("8", "8Gi", 110).Ready().Taint("k", "v", "NoSchedule").Info(),
	)
	_, err := a.Schedule(snap, st.Pod("p", "u1").Req("2", "512Mi").Info())
	fit, ok := err.(*framework.FitError)
	if !ok {
		t.Fatalf("err = %v, want a FitError", err)
	}
	want := map[string]bool{"NodeResourcesFit": true, "TaintToleration": true}
	if len(fit.Plugins) != len(want) || !want[fit.Plugins[0]] || !want[fit.Plugins[1]] {
		t.Errorf("plugins = %v, want %v", fit.Plugins, want)
	}
}
