package nodename

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

func TestNodeName(t *testing.T) {
	tests := []struct {
		name     string
		pod      *st.PodWrapper
		node     string
		wantSkip bool
		want     []string
	}{
		{"no nodeName: skipped", st.Pod("p", "u"), "n1", true, nil},
		{"named node", st.Pod("p", "u").NodeName("n1"), "n1", false, nil},
		{"other node", st.Pod("p", "u").NodeName("n2"), "n1", false, []string{ErrReason}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, state := New(), framework.NewCycleState()
			pod := tt.pod.Info()
			if got := p.PreFilter(state, pod).Code() == framework.Skip; got != tt.wantSkip {
				t.Errorf("skip = %v, want %v", got, tt.wantSkip)
			}
			got := p.Filter(state, pod, st.Node(tt.node).Info())
			if diff := cmp.Diff(tt.want, got.Reasons()); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}
