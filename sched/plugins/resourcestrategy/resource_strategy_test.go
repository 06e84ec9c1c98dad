package resourcestrategy

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/mostallocated"
	"github.com/podbus/podbus/sched/plugins/noderesources"
	st "github.com/podbus/podbus/sched/schedtest"
)

// With the default resources the scorer gives what the plugins it stands in for give.
func TestScorerMatchesPlugins(t *testing.T) {
	nodes := []*framework.NodeInfo{
		st.Node("a").Capacity("4", "8Gi", 110).Ready().Info(),
		st.Node("b").Capacity("4", "8Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 1500, Memory: 5 << 30, Pods: 2}),
		st.Node("c").Capacity("2", "16Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 1900, Memory: 1 << 30, Pods: 1}),
	}
	pod := st.Pod("p", "u").Req("300m", "700Mi").Info()
	cpuMem := []Resource{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}}
	for _, tt := range []struct {
		strategy string
		plugin   framework.ScorePlugin
	}{
		{LeastAllocated, noderesources.NewLeastAllocated()},
		{MostAllocated, mostallocated.New()},
	} {
		sc, err := New(ScoringStrategy{Type: tt.strategy, Resources: cpuMem})
		if err != nil {
			t.Fatal(err)
		}
		if sc.Name() != tt.plugin.Name() {
			t.Errorf("name %s, want %s", sc.Name(), tt.plugin.Name())
		}
		for _, n := range nodes {
			want, _ := tt.plugin.Score(nil, pod, n)
			got, _ := sc.Score(nil, pod, n)
			if got != want {
				t.Errorf("%s on %s: %d, want %d", tt.strategy, n.Name(), got, want)
			}
		}
	}
}

func TestScorerWeights(t *testing.T) {
	// cpu 50 % used after the pod, memory 25 %.
	node := st.Node("n").Capacity("4", "8Gi", 110).Ready().InfoRequested(&pb.Resources{MilliCpu: 1500, Memory: 1 << 30, Pods: 1})
	pod := st.Pod("p", "u").Req("500m", "1Gi").Info()
	gpuPod := st.Pod("g", "u").Req("500m", "1Gi").Request("example.com/gpu", "1").Info()
	gpuNode := st.Node("n").Capacity("4", "8Gi", 110).Allocatable("example.com/gpu", "4").Ready().InfoRequested(&pb.Resources{MilliCpu: 1500, Memory: 1 << 30, Pods: 1})
	shape := &RequestedToCapacityRatioParam{Shape: []UtilizationShapePoint{{Utilization: 0, Score: 10}, {Utilization: 100, Score: 0}}}
	tests := []struct {
		name string
		s    ScoringStrategy
		pod  *framework.PodInfo
		node *framework.NodeInfo
		want int64
	}{
		{"least, cpu 3 memory 1", ScoringStrategy{Type: LeastAllocated, Resources: []Resource{{"cpu", 3}, {"memory", 1}}}, pod, node, (50*3 + 75) / 4},
		{"most, memory only", ScoringStrategy{Type: MostAllocated, Resources: []Resource{{"memory", 1}}}, pod, node, 25},
		{"extended resource requested", ScoringStrategy{Type: MostAllocated, Resources: []Resource{{"example.com/gpu", 2}, {"cpu", 1}}}, gpuPod, gpuNode, (25*2 + 50) / 3},
		{"extended resource not requested", ScoringStrategy{Type: MostAllocated, Resources: []Resource{{"example.com/gpu", 2}, {"cpu", 1}}}, pod, gpuNode, 50},
		{"ratio, falling shape", ScoringStrategy{Type: RequestedToCapacityRatio, Resources: []Resource{{"cpu", 1}}, RequestedToCapacityRatio: shape}, pod, node, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := New(tt.s)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := sc.Score(nil, tt.pod, tt.node); got != tt.want {
				t.Errorf("score %d, want %d", got, tt.want)
			}
		})
	}
}

func TestFactory(t *testing.T) {
	tests := []struct {
		strategy string
		args     string
		want     string // plugin type, or "error"
	}{
		{LeastAllocated, "", "*noderesources.LeastAllocated"},
		{MostAllocated, `{"scoringStrategy":{"type":"MostAllocated"}}`, "*mostallocated.MostAllocated"},
		{MostAllocated, `{"scoringStrategy":{"type":"MostAllocated","resources":[{"name":"cpu","weight":2}]}}`, "*resourcestrategy.Scorer"},
		{LeastAllocated, `{"scoringStrategy":{"type":"MostAllocated"}}`, "error"},
		{RequestedToCapacityRatio, "", "error"},
		{LeastAllocated, `{"ignoredResources":["example.com/x"]}`, "error"},
	}
	for _, tt := range tests {
		p, err := Factory(tt.strategy)(json.RawMessage(tt.args))
		got := fmt.Sprintf("%T", p)
		if err != nil {
			got = "error"
			if !errors.Is(err, framework.ErrArgs) {
				t.Errorf("%s %s: %v is not ErrArgs", tt.strategy, tt.args, err)
			}
		}
		if got != tt.want {
			t.Errorf("%s %s: %s (%v), want %s", tt.strategy, tt.args, got, err, tt.want)
		}
	}
}
