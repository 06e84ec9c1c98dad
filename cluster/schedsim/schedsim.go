// Package schedsim models a cluster for scheduler tests and benchmarks without agents, as kwok and
// kube-scheduler's scheduler_perf do: nodes written straight into the nodes bucket (Ready, with
// capacity, labels and taints), pods already placed (bound pods plus their alloc records) and pods
// submitted as store commands (pod.cmd.create, the path admission takes, without the HTTP step).
package schedsim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/plugins"
	"github.com/podbus/podbus/services/binder"
)

// Well-known topology labels.
const (
	LabelHostname = "kubernetes.io/hostname"
	LabelZone     = "topology.kubernetes.io/zone"
)

// Node is a Ready node with cpu, memory and pod capacity (allocatable = capacity), the hostname label
// and the given labels and taints (NoSchedule unless the taint says otherwise).
func Node(name, cpu, memory string, pods int, labels map[string]string, taints ...*pb.Taint) *pb.Node {
	capacity := map[string]string{podutil.CPU: cpu, podutil.Memory: memory, podutil.Pods: strconv.Itoa(pods)}
	alloc := map[string]string{podutil.CPU: cpu, podutil.Memory: memory, podutil.Pods: strconv.Itoa(pods)}
	l := map[string]string{LabelHostname: name, "kubernetes.io/os": "linux"}
	for k, v := range labels {
		l[k] = v
	}
	now := timestamppb.Now()
	return &pb.Node{
		Metadata: &pb.ObjectMeta{Name: name, Uid: uuid.NewString(), Labels: l, CreationTimestamp: now},
		Spec:     &pb.NodeSpec{Taints: taints},
		Status: &pb.NodeStatus{
			Capacity: capacity, Allocatable: alloc, Phase: "Running",
			Conditions: []*pb.NodeCondition{{Type: podutil.NodeReady, Status: podutil.True, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now}},
		},
	}
}

// RegisterNodes writes nodes into the nodes bucket (an existing node is left as it is).
func RegisterNodes(ctx context.Context, kv jetstream.KeyValue, nodes []*pb.Node) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(64)
	for _, n := range nodes {
		g.Go(func() error {
			_, err := bus.Create(gctx, kv, bus.NodeKey(n.GetMetadata().GetName()), n)
			if errors.Is(err, bus.ErrExists) {
				return nil
			}
			return err
		})
	}
	return g.Wait()
}

// Pod is a pending pod with one container requesting cpu and memory and the server-owned fields set
// as admission sets them (uid, creation time, phase, QoS class, correlation id).
func Pod(namespace, name, cpu, memory string, labels map[string]string) *pb.Pod {
	uid := uuid.NewString()
	return &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: name, Namespace: namespace, Uid: uid, Labels: labels, Generation: 1,
			CreationTimestamp: timestamppb.New(time.Now().Truncate(time.Second))},
		Spec: &pb.PodSpec{
			Containers: []*pb.Container{{Name: "app", Image: "registry.local/pause:3.10",
				Resources: &pb.ResourceRequirements{Requests: map[string]string{podutil.CPU: cpu, podutil.Memory: memory}}}},
			RestartPolicy: "Always", DnsPolicy: "ClusterFirst", SchedulerName: "default-scheduler",
		},
		Status:   &pb.PodStatus{Phase: "Pending", QosClass: "Burstable"},
		Internal: &pb.PodInternal{CorrelationId: uuid.NewString()},
	}
}

// AsyncPublisher is a bus.Publisher or, to group commands as admission does, a bus.Batcher.
type AsyncPublisher interface {
	PublishAsync(subject string, m proto.Message, meta bus.Meta) (jetstream.PubAckFuture, error)
}

// Submit sends pod.cmd.create for every pod, as admission does but without waiting for the store's
// answers: publishes go out asynchronously, at most inflight unacknowledged at a time.
func Submit(ctx context.Context, pub AsyncPublisher, pods []*pb.Pod, inflight int) error {
	inflight = max(inflight, 1)
	pending := make([]jetstream.PubAckFuture, 0, inflight)
	for _, p := range pods {
		md := p.GetMetadata()
		f, err := pub.PublishAsync(bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, Pod: p}, bus.Meta{
			MsgID: "create-" + md.GetUid(), Correlation: p.GetInternal().GetCorrelationId(), PodUID: md.GetUid(),
			Key: md.GetNamespace() + "/" + md.GetName(),
		})
		if err != nil {
			return fmt.Errorf("submit %s: %w", md.GetName(), err)
		}
		pending = append(pending, f)
		if len(pending) == cap(pending) {
			if err := bus.Wait(ctx, pending...); err != nil {
				return err
			}
			pending = pending[:0]
		}
	}
	return bus.Wait(ctx, pending...)
}

// Place stores pods as already bound to the nodes named by nodeOf (spec.nodeName, PodScheduled=True)
// and writes the matching alloc records, as the binder would have. Capacity is not checked.
func Place(ctx context.Context, b bus.Buckets, pods []*pb.Pod, nodeOf func(i int) string) error {
	byNode := map[string]*pb.NodeAllocation{}
	for i, p := range pods {
		node := nodeOf(i)
		p.Spec.NodeName = node
		podutil.SetPodCondition(p, &pb.PodCondition{Type: podutil.PodScheduled, Status: podutil.True}, time.Now())
		a := byNode[node]
		if a == nil {
			a = &pb.NodeAllocation{Node: node, Pods: map[string]*pb.PodAllocation{}, Total: &pb.Resources{}}
			byNode[node] = a
		}
		pa := binder.PodAllocation(p)
		a.Pods[p.GetMetadata().GetUid()] = pa
		podutil.Add(a.Total, pa.GetRequests())
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(64)
	for _, p := range pods {
		g.Go(func() error {
			_, err := bus.Create(gctx, b.Pods, bus.PodKey(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName()), p)
			return err
		})
	}
	for node, a := range byNode {
		g.Go(func() error {
			return binder.PlaceAllocations(gctx, b.Alloc, node, a.Pods)
		})
	}
	return g.Wait()
}

// HasPlugin reports whether the scheduler's default plugin set has a plugin called name (tests and
// benchmarks enable the pods that need it only then).
func HasPlugin(name string) bool {
	for _, r := range plugins.DefaultPlugins() {
		if r.Plugin.Name() == name {
			return true
		}
	}
	return false
}
