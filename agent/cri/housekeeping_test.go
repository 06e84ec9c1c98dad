package cri_test

import (
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// On the real runtime, housekeeping removes the containers and sandbox of a pod deleted from the
// store without a termination reaching the agent, and leaves a stored pod's running.
func TestHousekeepingRemovesDeletedPod(t *testing.T) {
	r := startRealAgent(t, agent.Config{CleanupInterval: 200 * time.Millisecond})
	ctx, rt, busybox := r.ctx, r.rt, r.busybox
	running := func(name string) bool { return r.pod(name).GetStatus().GetPhase() == "Running" }
	sandboxes := func() map[string][]agent.ContainerStatus {
		infos, err := rt.ListSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]agent.ContainerStatus{}
		for _, info := range infos {
			out[info.PodUID] = info.Containers
		}
		return out
	}

	gone := newPod("gone", ctr("gone", busybox, "sleep", "3600"))
	kept := newPod("kept", ctr("kept", busybox, "sleep", "3600"))
	for _, p := range []*pb.Pod{gone, kept} {
		r.bind(p)
	}
	bustest.Eventually(t, 30*time.Second, func() bool { return running("gone") && running("kept") }, "both pods Running")
	if err := r.pods.Delete(ctx, bus.PodKey("default", "gone")); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 30*time.Second, func() bool {
		_, ok := sandboxes()[gone.Metadata.Uid]
		return !ok
	}, "the deleted pod's sandbox and containers removed")
	sb := sandboxes()
	if cs := sb[kept.Metadata.Uid]; len(cs) != 1 || cs[0].State != agent.StateRunning {
		t.Errorf("the stored pod's containers: %+v; want one running", cs)
	}
}
