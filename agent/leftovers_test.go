package agent_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// barrierRuntime holds every RemoveSandbox until want of them are under way at once.
type barrierRuntime struct {
	*fake.Runtime
	want int

	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func (r *barrierRuntime) RemoveSandbox(ctx context.Context, sb agent.Sandbox) error {
	r.mu.Lock()
	r.arrived++
	if r.arrived == r.want {
		close(r.all)
	}
	r.mu.Unlock()
	select {
	case <-r.all:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.Runtime.RemoveSandbox(ctx, sb)
}

// Pods deleted while the agent was away, outright or only marked for deletion (an eviction that no
// agent confirmed), have their sandboxes removed together when it comes back: one removal waiting on
// the runtime does not hold back the others, nor the node's return. The pod still in the store is
// reported gone, and the pod kept is adopted.
func TestReconcileRemovesLeftoversTogether(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	keep, gone1, gone2, marked := newPod("keep"), newPod("gone-1"), newPod("gone-2"), newPod("marked")
	all := []*pb.Pod{keep, gone1, gone2, marked}
	for _, p := range all {
		e.create(p)
	}
	for _, p := range all {
		e.until(p, "running", isRunningReady)
	}

	e.stopAgent()
	ctx := context.Background()
	for _, p := range []*pb.Pod{gone1, gone2} {
		var cur pb.Pod
		rev, err := bus.Get(ctx, e.pods, bus.PodKey("default", p.Metadata.Name), &cur)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Delete(ctx, e.pods, bus.PodKey("default", p.Metadata.Name), rev); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := bus.Mutate(ctx, e.pods, bus.PodKey("default", "marked"), func() *pb.Pod { return &pb.Pod{} }, 10, func(p *pb.Pod) (bool, error) {
		p.Metadata.DeletionTimestamp = timestamppb.Now()
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}

	rt := &barrierRuntime{Runtime: e.rt, want: 3, all: make(chan struct{})}
	a, err := agent.New(testConfig(), e.conn, rt)
	if err != nil {
		t.Fatal(err)
	}
	e.stopAgent = e.run(t, a.Run)
	bustest.Eventually(t, wait, func() bool { return e.rt.Running() == 1 && e.rt.IPsInUse() == 1 }, "leftover sandboxes removed")
	bustest.Eventually(t, wait, func() bool { return e.get(marked) == nil }, "the pod marked for deletion reported gone")
	e.until(keep, "re-adopted", isRunningReady)
}
