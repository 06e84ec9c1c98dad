package nodeunschedulable

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/podbus/podbus/sched/framework"
	st "github.com/podbus/podbus/sched/schedtest"
)

// Cases from the Kubernetes docs: a cordoned node takes no new pods, unless they tolerate
// node.kubernetes.io/unschedulable:NoSchedule (as DaemonSet pods do).
func TestFilter(t *testing.T) {
	tests := []struct {
		name string
		pod  *st.PodWrapper
		node *st.NodeWrapper
		want []string
	}{
		{"schedulable node", st.Pod("p", "u"), st.Node("n"), nil},
		{"cordoned node", st.Pod("p", "u"), st.Node("n").Unschedulable(), []string{ErrReasonUnschedulable}},
		{"tolerates with Exists", st.Pod("p", "u").Toleration(TaintNodeUnschedulable, "Exists", "", "NoSchedule"), st.Node("n").Unschedulable(), nil},
		{"tolerates everything", st.Pod("p", "u").Toleration("", "Exists", "", ""), st.Node("n").Unschedulable(), nil},
		{"toleration for another effect", st.Pod("p", "u").Toleration(TaintNodeUnschedulable, "Exists", "", "NoExecute"), st.Node("n").Unschedulable(), []string{ErrReasonUnschedulable}},
		{"toleration for another key", st.Pod("p", "u").Toleration("other", "Exists", "", "NoSchedule"), st.Node("n").Unschedulable(), []string{ErrReasonUnschedulable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := New().Filter(framework.NewCycleState(), tt.pod.Info(), tt.node.Info())
			if diff := cmp.Diff(tt.want, got.Reasons()); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}
