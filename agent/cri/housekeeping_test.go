package cri_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/status"
)

// On the real runtime, housekeeping removes the containers and sandbox of a pod deleted from the
// store without a termination reaching the agent, and leaves a stored pod's running.
func TestHousekeepingRemovesDeletedPod(t *testing.T) {
	requireContainerd(t)
	_, busybox := startRegistry(t)
	node, cidr := testNode(), testCIDR()
	rt := newRuntime(t, node, cidr, testNamespace(), "")

	_, conn := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	buckets, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := status.New(status.Config{ID: "s1"}, conn)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Node: node, PodCIDR: cidr, HeartbeatInterval: 100 * time.Millisecond,
		CleanupInterval: 200 * time.Millisecond}, conn, rt)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	for _, run := range []func(context.Context) error{svc.Run, a.Run} {
		go func() {
			if err := run(ctx); err != nil {
				t.Errorf("run: %v", err)
			}
			done <- struct{}{}
		}()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })

	pub := bus.NewPublisher(conn.JS, "test")
	bind := func(p *pb.Pod) {
		p.Spec.NodeName = node
		p.Metadata.CreationTimestamp = timestamppb.Now()
		p.Status = &pb.PodStatus{Phase: "Pending"}
		rev, err := bus.Create(ctx, buckets.Pods, bus.PodKey("default", p.Metadata.Name), p)
		if err != nil {
			t.Fatal(err)
		}
		meta := bus.Meta{MsgID: "bound-" + p.Metadata.Uid, PodUID: p.Metadata.Uid, Key: "default/" + p.Metadata.Name}
		if err := pub.Publish(ctx, bus.SubjPodBound(node), &pb.PodBinding{Pod: p, Revision: rev, Node: node}, meta); err != nil {
			t.Fatal(err)
		}
	}
	running := func(name string) bool {
		var p pb.Pod
		_, err := bus.Get(ctx, buckets.Pods, bus.PodKey("default", name), &p)
		return err == nil && p.GetStatus().GetPhase() == "Running"
	}
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
		bind(p)
	}
	bustest.Eventually(t, 30*time.Second, func() bool { return running("gone") && running("kept") }, "both pods Running")
	if err := buckets.Pods.Delete(ctx, bus.PodKey("default", "gone")); err != nil {
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
