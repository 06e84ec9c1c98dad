package nodeready

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

func TestFilter(t *testing.T) {
	pod := st.Pod("p", "u").Info()
	tests := []struct {
		name string
		node *st.NodeWrapper
		want []string
	}{
		{"ready", st.Node("n").Ready(), nil},
		{"no conditions", st.Node("n"), []string{ErrReasonNotReady}},
		{"ready false", st.Node("n").Condition("Ready", "False"), []string{ErrReasonNotReady}},
		{"ready unknown (heartbeats stopped)", st.Node("n").Condition("Ready", "Unknown"), []string{ErrReasonNotReady}},
		{"other condition true only", st.Node("n").Condition("MemoryPressure", "True"), []string{ErrReasonNotReady}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := New().Filter(framework.NewCycleState(), pod, tt.node.Info())
			if diff := cmp.Diff(tt.want, got.Reasons()); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			if tt.want != nil && got.Code() != framework.UnschedulableAndUnresolvable {
				t.Errorf("code = %v", got.Code())
			}
		})
	}
}
