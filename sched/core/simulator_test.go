package core

import (
	"fmt"
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/config"
	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

// The default profile spreads pods over empty nodes; MostAllocated packs them. Same input, same output.
func TestSimulatorSpreadsOrPacks(t *testing.T) {
	place := func(p config.Profile) map[string]int {
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
	spread := place(config.Profile{})
	if len(spread) != 4 {
		t.Errorf("LeastAllocated used %d nodes, want 4: %v", len(spread), spread)
	}
	packed := place(config.Profile{Scoring: config.MostAllocated})
	if len(packed) > 2 {
		t.Errorf("MostAllocated used %d nodes, want at most 2: %v", len(packed), packed)
	}
	if again := place(config.Profile{Scoring: config.MostAllocated}); fmt.Sprint(again) != fmt.Sprint(packed) {
		t.Errorf("not deterministic: %v then %v", packed, again)
	}
}
