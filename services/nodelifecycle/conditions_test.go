package nodelifecycle

import (
	"context"
	"testing"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// setConditions writes the node's conditions (Ready True plus the given ones), keeping its spec.
func (e *env) setConditions(name string, conds map[string]string) {
	e.t.Helper()
	e.setReady(name, podutil.True)
	ctx := context.Background()
	for range 16 {
		n := &pb.Node{}
		rev, err := bus.Get(ctx, e.nodes, bus.NodeKey(name), n)
		if err != nil {
			e.t.Fatal(err)
		}
		n.Status = &pb.NodeStatus{Conditions: []*pb.NodeCondition{{Type: podutil.NodeReady, Status: podutil.True}}}
		for typ, st := range conds {
			n.Status.Conditions = append(n.Status.Conditions, &pb.NodeCondition{Type: typ, Status: st})
		}
		if _, err = bus.Update(ctx, e.nodes, bus.NodeKey(name), n, rev); err == nil {
			return
		}
	}
	e.t.Fatalf("could not write node %s", name)
}

// Pressure conditions and NetworkUnavailable taint the node NoSchedule while they are True (kube's
// TaintNodesByCondition); users' taints stay.
func TestTaintsFollowConditions(t *testing.T) {
	e := setup(t)
	e.run(Config{ID: "r1"})
	user := &pb.Taint{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}
	e.setReady("n1", podutil.True, user)
	steps := []struct {
		conds map[string]string
		want  []string
	}{
		{map[string]string{"MemoryPressure": podutil.True, "DiskPressure": podutil.False},
			[]string{"node.kubernetes.io/memory-pressure:NoSchedule"}},
		{map[string]string{"MemoryPressure": podutil.True, "DiskPressure": podutil.True, "PIDPressure": podutil.True},
			[]string{"node.kubernetes.io/memory-pressure:NoSchedule", "node.kubernetes.io/disk-pressure:NoSchedule", "node.kubernetes.io/pid-pressure:NoSchedule"}},
		{map[string]string{"MemoryPressure": podutil.False, "NetworkUnavailable": podutil.True},
			[]string{"node.kubernetes.io/network-unavailable:NoSchedule"}},
		{map[string]string{"MemoryPressure": podutil.False, "NetworkUnavailable": podutil.False}, nil},
	}
	for i, st := range steps {
		e.setConditions("n1", st.conds)
		want := map[string]bool{"dedicated:NoSchedule": true}
		for _, k := range st.want {
			want[k] = true
		}
		bustest.Eventually(t, wait, func() bool { return sameSet(taintSet(e.node("n1")), want) },
			"step %d: taints %v, want %v", i, taintSet(e.node("n1")), want)
	}
}
