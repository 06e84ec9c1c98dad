package loadtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/podbus/podbus/internal/events"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// startCeiling runs stand-ins for store, scheduler and binder that do what one pod costs in JetStream
// and nothing else: the store's KV create and pod.pending, a decision on pod.scheduled (node picked by a
// hash of the uid), the binder's alloc and pod compare-and-sets, pod.bound and the Scheduled event, each
// stage acking its message after its effect, with the services' consumers, worker counts and keys. Its
// batchers do not linger (bus.WithLinger): a stand-in waits for each publish in a few workers, where the
// services keep many in flight, so a linger would measure the wait instead of JetStream.
func startCeiling(start func(string, func(context.Context, *bus.Conn) error) error, b bus.Buckets) error {
	var pods sync.Map // uid -> *pb.Pod as created (the binder stand-in skips the read the real one does)
	if err := start("ceiling-store", func(ctx context.Context, c *bus.Conn) error {
		pub := bus.NewBatcher(c.JS, "store/ceiling", bus.WithLinger(0))
		return bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: bus.ConsumerStore,
			Filters: []string{bus.SubjPodCommands}, Workers: 32, Key: func(m *bus.Msg) string { return m.Meta.Key }},
			func(ctx context.Context, m *bus.Msg) error {
				cmd := &pb.PodCommand{}
				if err := m.Decode(cmd); err != nil {
					return err
				}
				p := cmd.GetPod()
				md := p.GetMetadata()
				rev, err := bus.Create(ctx, b.Pods, bus.PodKey(md.GetNamespace(), md.GetName()), p)
				if err != nil {
					return err
				}
				pods.Store(md.GetUid(), p)
				return pub.Publish(ctx, bus.SubjPodPending, &pb.PendingPod{Pod: p, Revision: rev, Cause: "created"},
					bus.Meta{MsgID: fmt.Sprintf("pending-%s-%d", md.GetUid(), rev), PodUID: md.GetUid(), Key: m.Meta.Key})
			})
	}); err != nil {
		return err
	}
	if err := start("ceiling-scheduler", func(ctx context.Context, c *bus.Conn) error {
		pub := bus.NewBatcher(c.JS, "scheduler/ceiling", bus.WithLinger(0))
		keys, err := b.Nodes.ListKeys(ctx)
		if err != nil {
			return err
		}
		var nodes []string
		for k := range keys.Keys() {
			nodes = append(nodes, k)
		}
		if len(nodes) == 0 {
			return fmt.Errorf("no nodes")
		}
		return bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: bus.ConsumerScheduler,
			Filters: []string{bus.SubjPodPending}, Workers: 4, Key: func(m *bus.Msg) string { return m.Meta.PodUID }},
			func(ctx context.Context, m *bus.Msg) error {
				pp := &pb.PendingPod{}
				if err := m.Decode(pp); err != nil {
					return err
				}
				md := pp.GetPod().GetMetadata()
				d := &pb.SchedulingDecision{Uid: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(),
					PodRevision: pp.GetRevision(), Node: nodes[int(fnv32(md.GetUid()))%len(nodes)], DecidedAt: timestamppb.Now()}
				return pub.Publish(ctx, bus.SubjPodScheduled, d, bus.Meta{MsgID: "sched-" + md.GetUid(), PodUID: md.GetUid(), Key: m.Meta.Key})
			})
	}); err != nil {
		return err
	}
	return start("ceiling-binder", func(ctx context.Context, c *bus.Conn) error {
		pub := bus.NewPublisher(c.JS, "binder/ceiling")
		h := binderStandIn(b, &pods, pub, events.NewRecorder(bus.NewBatcher(c.JS, "binder/ceiling", bus.WithLinger(0)), "default-scheduler", "binder/ceiling"))
		return bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: bus.ConsumerBinder,
			Filters: []string{bus.SubjPodScheduled}, Workers: 32, Key: decisionNode}, h)
	})
}

func decisionNode(m *bus.Msg) string {
	d := &pb.SchedulingDecision{}
	_ = proto.Unmarshal(m.Data, d)
	return d.GetNode()
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func binderStandIn(b bus.Buckets, pods *sync.Map, pub *bus.Publisher, rec *events.Recorder) bus.Handler {
	return func(ctx context.Context, m *bus.Msg) error {
		d := &pb.SchedulingDecision{}
		if err := m.Decode(d); err != nil {
			return err
		}
		v, ok := pods.Load(d.GetUid())
		if !ok {
			return fmt.Errorf("%w: unknown pod", bus.ErrPermanent)
		}
		pod := proto.Clone(v.(*pb.Pod)).(*pb.Pod)
		node := d.GetNode()
		// This stand-in is the only writer and checks no capacity: the pod's key, once.
		pa := &pb.PodAllocation{Namespace: d.GetNamespace(), Name: d.GetName(), Requests: podutil.PodRequests(pod), Labels: pod.GetMetadata().GetLabels()}
		if _, err := bus.Create(ctx, b.Alloc, bus.AllocPodKey(node, d.GetUid()), pa); err != nil && !errors.Is(err, bus.ErrExists) {
			return err
		}
		pod.Spec.NodeName = node
		podutil.SetPodCondition(pod, &pb.PodCondition{Type: podutil.PodScheduled, Status: podutil.True}, time.Now())
		md := pod.GetMetadata()
		prev, err := bus.Update(ctx, b.Pods, bus.PodKey(d.GetNamespace(), d.GetName()), pod, d.GetPodRevision())
		if err != nil {
			return err
		}
		bound, err := pub.PublishAsync(bus.SubjPodBound(node), &pb.PodBinding{Pod: pod, Revision: prev, Node: node},
			bus.Meta{MsgID: "bound-" + md.GetUid(), PodUID: md.GetUid(), Key: m.Meta.Key})
		if err != nil {
			return err
		}
		ev, err := rec.Event(events.PodRef(pod), "Normal", "Scheduled", "Successfully assigned "+md.GetName()+" to "+node, node, time.Now())
		if err != nil {
			return err
		}
		return bus.Wait(ctx, bound, ev)
	}
}
