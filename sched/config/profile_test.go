package scheduler

import (
	"errors"
	"fmt"
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/mostallocated"
	"github.com/podbus/podbus/sched/plugins/noderesources"
	st "github.com/podbus/podbus/sched/schedtest"
)

func TestParseProfile(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr bool
		score   string // the resource score plugin
		weight  int64  // its weight
	}{
		{"empty is the default", "", false, noderesources.LeastAllocatedName, 1},
		{"most allocated", "scoring: MostAllocated\n", false, mostallocated.Name, 1},
		{"weights", "scoring: MostAllocated\nweights:\n  NodeResourcesMostAllocated: 5\n  TaintToleration: 1\n", false, mostallocated.Name, 5},
		{"drop the resource score", "weights:\n  NodeResourcesLeastAllocated: 0\n", false, "", 0},
		{"unknown scoring", "scoring: Random\n", true, "", 0},
		{"unknown field", "scorng: MostAllocated\n", true, "", 0},
		{"unknown plugin", "weights:\n  Nope: 1\n", true, "", 0},
		{"filter plugin weight", "weights:\n  NodeName: 2\n", true, "", 0},
		{"NodeResourcesFit names the resource score", "weights:\n  NodeResourcesFit: 4\n", false, noderesources.LeastAllocatedName, 4},
		{"NodeResourcesFit with MostAllocated", "scoring: MostAllocated\nweights:\n  NodeResourcesFit: 3\n", false, mostallocated.Name, 3},
		{"list form", "profiles:\n- schedulerName: default-scheduler\n  scoring: MostAllocated\n", false, mostallocated.Name, 1},
		{"list form and inline scoring", "scoring: MostAllocated\nprofiles:\n- schedulerName: a\n", true, "", 0},
		{"duplicate scheduler names", "profiles:\n- schedulerName: a\n- schedulerName: a\n", true, "", 0},
		{"default name twice", "profiles:\n- {}\n- schedulerName: default-scheduler\n", true, "", 0},
		{"percentage out of range", "percentageOfNodesToScore: 101\n", true, "", 0},
		{"negative weight", "weights:\n  TaintToleration: -1\n", true, "", 0},
		{"zero weight on a filter", "weights:\n  TaintToleration: 0\n", true, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseProfile([]byte(tt.yaml))
			if tt.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			regs, err := p.Plugins()
			if err != nil {
				t.Fatal(err)
			}
			var got string
			var w int64
			for _, r := range regs {
				if n := r.Plugin.Name(); n == noderesources.LeastAllocatedName || n == mostallocated.Name {
					got, w = n, r.Weight
				}
			}
			if got != tt.score || w != tt.weight {
				t.Errorf("resource score = %q weight %d, want %q weight %d", got, w, tt.score, tt.weight)
			}
		})
	}
}

// The default profile spreads pods over empty nodes; MostAllocated packs them. Same input, same output.
func TestSimulatorSpreadsOrPacks(t *testing.T) {
	place := func(p Profile) map[string]int {
		sim, err := NewSimulator(p)
		if err != nil {
			t.Fatal(err)
		}
		used := map[string]*pb.Resources{}
		perNode := map[string]int{}
		for i := 0; i < 12; i++ {
			var infos []*framework.NodeInfo
			for _, n := range []string{"a", "b", "c", "d"} {
				req := used[n]
				if req == nil {
					req = &pb.Resources{}
				}
				infos = append(infos, st.Node(n).Capacity("4", "8Gi", 110).Ready().InfoRequested(req))
			}
			pod := st.Pod(fmt.Sprintf("p%d", i), fmt.Sprintf("uid-%d", i)).Req("250m", "512Mi").Info()
			r, err := sim.Schedule(framework.SnapshotOf(infos...), pod)
			if err != nil {
				t.Fatal(err)
			}
			if used[r.Node] == nil {
				used[r.Node] = &pb.Resources{}
			}
			used[r.Node].MilliCpu += pod.Requests.GetMilliCpu()
			used[r.Node].Memory += pod.Requests.GetMemory()
			perNode[r.Node]++
		}
		return perNode
	}
	spread := place(Profile{})
	if len(spread) != 4 {
		t.Errorf("LeastAllocated used %d nodes, want 4: %v", len(spread), spread)
	}
	packed := place(Profile{Scoring: MostAllocated})
	if len(packed) > 2 {
		t.Errorf("MostAllocated used %d nodes, want at most 2: %v", len(packed), packed)
	}
	if again := place(Profile{Scoring: MostAllocated}); fmt.Sprint(again) != fmt.Sprint(packed) {
		t.Errorf("not deterministic: %v then %v", packed, again)
	}
}
