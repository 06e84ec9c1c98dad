package cri_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/status"
)

// realAgent is an embedded server with a status service and an agent on a real runtime of a node of
// its own, run until the test ends.
type realAgent struct {
	t    *testing.T
	ctx  context.Context
	conn *bus.Conn
	pods jetstream.KeyValue
	pub  *bus.Publisher
	rt   *cri.Runtime
	node string
	// busybox is the busybox image in the test's registry.
	busybox string
}

// startRealAgent runs an agent configured by cfg, with the node, its pod CIDR and heartbeats every
// 100 ms filled in, and a registry holding busybox. Without containerd it skips the test (fails it
// in CI).
func startRealAgent(t *testing.T, cfg agent.Config) *realAgent {
	t.Helper()
	requireContainerd(t)
	_, busybox := startRegistry(t)
	cfg.Node, cfg.PodCIDR, cfg.HeartbeatInterval = testNode(), testCIDR(), 100*time.Millisecond
	rt := newRuntime(t, cfg.Node, cfg.PodCIDR, testNamespace(), "")
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
	a, err := agent.New(cfg, conn, rt)
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
	return &realAgent{t: t, ctx: ctx, conn: conn, pods: buckets.Pods, pub: bus.NewPublisher(conn.JS, "test"), rt: rt, node: cfg.Node, busybox: busybox}
}

// bind stores p on the agent's node and hands it to the agent as the binder would.
func (r *realAgent) bind(p *pb.Pod) {
	r.t.Helper()
	p.Spec.NodeName = r.node
	p.Metadata.CreationTimestamp = timestamppb.Now()
	p.Status = &pb.PodStatus{Phase: "Pending"}
	rev, err := bus.Create(r.ctx, r.pods, bus.PodKey("default", p.Metadata.Name), p)
	if err != nil {
		r.t.Fatal(err)
	}
	meta := bus.Meta{MsgID: "bound-" + p.Metadata.Uid, PodUID: p.Metadata.Uid, Key: "default/" + p.Metadata.Name}
	if err := r.pub.Publish(r.ctx, bus.SubjPodBound(r.node), &pb.PodBinding{Pod: p, Revision: rev, Node: r.node}, meta); err != nil {
		r.t.Fatal(err)
	}
}

// pod is the stored pod default/name, nil if there is none.
func (r *realAgent) pod(name string) *pb.Pod {
	var got pb.Pod
	if _, err := bus.Get(r.ctx, r.pods, bus.PodKey("default", name), &got); err != nil {
		return nil
	}
	return &got
}
