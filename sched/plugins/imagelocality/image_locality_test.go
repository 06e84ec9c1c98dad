package imagelocality

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

const mib = 1024 * 1024

// Cases after kube-scheduler's image_locality_test: sizes scaled by spread, clamped to 23..1000 MiB
// per container.
func TestScore(t *testing.T) {
	tests := []struct {
		name  string
		pod   *st.PodWrapper
		nodes []*st.NodeWrapper
		want  map[string]int64 // nil: skipped
	}{
		{"no node has the image", st.Pod("p", "u").Image("nginx:1.27"), []*st.NodeWrapper{st.Node("n1"), st.Node("n2").Image(500*mib, "redis:7")}, nil},
		// 500 MiB on 1 of 2 nodes -> 250 MiB: 100 × (250 − 23) / (1000 − 23) = 23
		{"one node holds it", st.Pod("p", "u").Image("nginx:1.27"),
			[]*st.NodeWrapper{st.Node("n1").Image(500*mib, "nginx:1.27"), st.Node("n2")}, map[string]int64{"n1": 23, "n2": 0}},
		// untagged names mean :latest; 2000 MiB on both nodes is above the 1000 MiB ceiling -> 100
		{"untagged is latest, capped at the max", st.Pod("p", "u").Image("nginx"),
			[]*st.NodeWrapper{st.Node("n1").Image(2000*mib, "nginx:latest"), st.Node("n2").Image(2000*mib, "docker.io/nginx", "nginx:latest")},
			map[string]int64{"n1": 100, "n2": 100}},
		// small images stay below the 23 MiB floor
		{"below the floor", st.Pod("p", "u").Image("busybox:1"), []*st.NodeWrapper{st.Node("n1").Image(4*mib, "busybox:1")}, map[string]int64{"n1": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var infos []*framework.NodeInfo
			for _, n := range tt.nodes {
				infos = append(infos, n.Info())
			}
			snap := framework.SnapshotOf(infos...)
			p, pod, state := New(), tt.pod.Info(), framework.NewCycleState()
			state.SetSnapshot(snap)
			if skipped := p.PreScore(state, pod, snap.Nodes()).Code() == framework.Skip; skipped != (tt.want == nil) {
				t.Fatalf("skipped = %v", skipped)
			}
			if tt.want == nil {
				return
			}
			got := map[string]int64{}
			for _, n := range snap.Nodes() {
				got[n.Name()], _ = p.Score(state, pod, n)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
