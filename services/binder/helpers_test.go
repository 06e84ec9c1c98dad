package binder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

var fixedNow = time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

// harness is one nats-server; binders are added with service (direct calls) or run (consuming).
type harness struct {
	t    *testing.T
	url  string
	conn *bus.Conn
	b    bus.Buckets
	pub  *bus.Publisher
}

func setup(t *testing.T) *harness {
	t.Helper()
	_, url := bustest.Server(t)
	conn := bustest.Conn(t, url, "test")
	b, err := bus.OpenBuckets(context.Background(), conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, url: url, conn: conn, b: b, pub: bus.NewPublisher(conn.JS, "scheduler/test")}
}

// service is a binder whose steps the test calls directly (nothing consumes).
func (h *harness) service(id string) *Service {
	h.t.Helper()
	s, err := New(Config{ID: id}, bustest.Conn(h.t, h.url, id))
	if err != nil {
		h.t.Fatal(err)
	}
	s.now = func() time.Time { return fixedNow }
	if err := s.open(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	return s
}

// run starts a binder replica on its own connection; the returned stop cancels it and waits for Run.
func (h *harness) run(id string, opts ...func(*Service)) (stop func()) {
	h.t.Helper()
	s, err := New(Config{ID: id}, bustest.Conn(h.t, h.url, id))
	if err != nil {
		h.t.Fatal(err)
	}
	for _, o := range opts {
		o(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("binder %s: Run: %v", id, err)
			}
		})
	}
	h.t.Cleanup(stop)
	return stop
}

func node(name, cpu string, ready bool) *pb.Node {
	status := podutil.True
	if !ready {
		status = podutil.Unknown
	}
	return &pb.Node{
		Metadata: &pb.ObjectMeta{Name: name},
		Status: &pb.NodeStatus{
			Allocatable: map[string]string{"cpu": cpu, "memory": "4Gi", "pods": "110"},
			Conditions:  []*pb.NodeCondition{{Type: podutil.NodeReady, Status: status}},
		},
	}
}

func (h *harness) addNode(n *pb.Node) {
	h.t.Helper()
	if _, err := bus.Create(context.Background(), h.b.Nodes, bus.NodeKey(n.GetMetadata().GetName()), n); err != nil {
		h.t.Fatal(err)
	}
}

func pod(uid, name, cpu string, mods ...func(*pb.Pod)) *pb.Pod {
	p := &pb.Pod{
		Metadata: &pb.ObjectMeta{Namespace: "default", Name: name, Uid: uid},
		Spec: &pb.PodSpec{Containers: []*pb.Container{{Name: "c", Image: "nginx",
			Resources: &pb.ResourceRequirements{Requests: map[string]string{"cpu": cpu}}}}},
		Status:   &pb.PodStatus{Phase: "Pending"},
		Internal: &pb.PodInternal{CorrelationId: "corr-" + uid},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

// boundTo binds the pod as a binder does: nodeName and PodScheduled=True.
func boundTo(node string) func(*pb.Pod) {
	return func(p *pb.Pod) {
		p.Spec.NodeName = node
		p.Status.Conditions = append(p.Status.Conditions, &pb.PodCondition{Type: podutil.PodScheduled, Status: podutil.True})
	}
}

// preBoundTo names the node at creation, as a client may (no PodScheduled condition yet).
func preBoundTo(node string) func(*pb.Pod) { return func(p *pb.Pod) { p.Spec.NodeName = node } }

func deleting(p *pb.Pod) {
	p.Metadata.DeletionTimestamp = timestamppb.New(fixedNow)
	p.Metadata.DeletionGracePeriodSeconds = proto.Int64(30)
}

func (h *harness) addPod(p *pb.Pod) uint64 {
	h.t.Helper()
	md := p.GetMetadata()
	rev, err := bus.Create(context.Background(), h.b.Pods, bus.PodKey(md.GetNamespace(), md.GetName()), p)
	if err != nil {
		h.t.Fatal(err)
	}
	return rev
}

// getPod returns the stored pod, or nil.
func (h *harness) getPod(name string) *pb.Pod {
	h.t.Helper()
	p := &pb.Pod{}
	_, err := bus.Get(context.Background(), h.b.Pods, bus.PodKey("default", name), p)
	if errors.Is(err, bus.ErrNotFound) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// allocPods lists the uids reserved on node (its pod keys).
func (h *harness) allocPods(node string) map[string]bool {
	h.t.Helper()
	a, _, err := ReadAllocation(context.Background(), h.b.Alloc, node)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]bool{}
	for uid := range a.GetPods() {
		out[uid] = true
	}
	return out
}

func decision(uid, name, node string) *pb.SchedulingDecision {
	return &pb.SchedulingDecision{Uid: uid, Namespace: "default", Name: name, Node: node, Scheduler: "scheduler/test", PodRevision: 1, Attempt: 1}
}

func (h *harness) publishDecision(d *pb.SchedulingDecision, msgID string) {
	h.t.Helper()
	meta := bus.Meta{MsgID: msgID, PodUID: d.GetUid(), Key: d.GetNamespace() + "/" + d.GetName()}
	if err := h.pub.Publish(context.Background(), bus.SubjPodScheduled, d, meta); err != nil {
		h.t.Fatal(err)
	}
}

// msgs returns the messages stored on subject in stream, oldest first.
func (h *harness) msgs(stream, subject string) []*jetstream.RawStreamMsg {
	h.t.Helper()
	return bustest.Messages(h.t, h.conn, stream, subject)
}

// quiesce waits until both binder consumers have acknowledged every message published so far.
func (h *harness) quiesce() {
	h.t.Helper()
	ctx := context.Background()
	st, err := h.conn.JS.Stream(ctx, bus.StreamPods)
	if err != nil {
		h.t.Fatal(err)
	}
	bustest.Eventually(h.t, 25*time.Second, func() bool {
		for name, subject := range map[string]string{bus.ConsumerBinder: bus.SubjPodScheduled, bus.ConsumerBinderDeleted: bus.SubjPodDeleted} {
			var last uint64
			m, err := st.GetLastMsgForSubject(ctx, subject)
			switch {
			case err == nil:
				last = m.Sequence
			case !errors.Is(err, jetstream.ErrMsgNotFound):
				return false
			}
			c, err := h.conn.JS.Consumer(ctx, bus.StreamPods, name)
			if err != nil {
				return false
			}
			info, err := c.Info(ctx)
			if err != nil || info.NumAckPending > 0 || info.AckFloor.Stream < last {
				return false
			}
		}
		return true
	}, "binder consumers never settled")
}

// invariants watches the pods and alloc buckets while binders run and records every violation of
// "a pod is bound at most once" and "a node's total never exceeds its allocatable".
type invariants struct {
	mu         sync.Mutex
	boundTo    map[string]string // uid -> first node seen
	violations []string
}

func (h *harness) watchInvariants(allocatable map[string]*pb.Resources) *invariants {
	h.t.Helper()
	inv := &invariants{boundTo: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	h.t.Cleanup(func() { cancel(); wg.Wait() })
	watch := func(kv jetstream.KeyValue, f func(jetstream.KeyValueEntry)) {
		w, err := kv.WatchAll(ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = w.Stop() }()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-w.Updates():
					if !ok {
						return
					}
					if e != nil {
						f(e)
					}
				}
			}
		}()
	}
	watch(h.b.Pods, func(e jetstream.KeyValueEntry) {
		p := &pb.Pod{}
		if err := proto.Unmarshal(e.Value(), p); e.Operation() != jetstream.KeyValuePut || err != nil {
			return
		}
		uid, n := p.GetMetadata().GetUid(), p.GetSpec().GetNodeName()
		inv.mu.Lock()
		defer inv.mu.Unlock()
		if first, ok := inv.boundTo[uid]; ok && first != n {
			inv.violations = append(inv.violations, fmt.Sprintf("pod %s bound to %s, then %q", uid, first, n))
		} else if n != "" {
			inv.boundTo[uid] = n
		}
	})
	nodes := map[string]*nodeState{} // the alloc keys folded per node, as a scheduler folds them
	watch(h.b.Alloc, func(e jetstream.KeyValueEntry) {
		node, uid, pa, meta, ok := decodeAllocEntry(e)
		if !ok {
			return
		}
		inv.mu.Lock()
		defer inv.mu.Unlock()
		n := nodes[node]
		if n == nil {
			n = newNodeState()
			nodes[node] = n
		}
		n.apply(uid, pa, meta, e.Revision())
		if short := podutil.Insufficient(allocatable[node], &pb.Resources{}, n.total); len(short) > 0 {
			inv.violations = append(inv.violations, fmt.Sprintf("alloc of %s over allocatable in %v at revision %d: %v", node, short, e.Revision(), n.total))
		}
	})
	return inv
}

func (inv *invariants) check(t *testing.T) {
	t.Helper()
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, v := range inv.violations {
		t.Error(v)
	}
}

// checkFinal verifies, once settled, that every node's reservations are exactly the pods bound to it
// (nothing leaked, nothing missing) and that each pod was handed to at most one node.
func (h *harness) checkFinal(nodes []string, pods []*pb.Pod) (bound int) {
	h.t.Helper()
	want := map[string]map[string]bool{}
	for _, n := range nodes {
		want[n] = map[string]bool{}
	}
	for _, p := range pods {
		cur := h.getPod(p.GetMetadata().GetName())
		if cur == nil {
			continue
		}
		if n := cur.GetSpec().GetNodeName(); n != "" {
			want[n][cur.GetMetadata().GetUid()] = true
			bound++
		}
	}
	for _, n := range nodes {
		got := h.allocPods(n)
		if fmt.Sprint(got) != fmt.Sprint(want[n]) {
			h.t.Errorf("alloc/%s holds %v, pods bound there: %v", n, got, want[n])
		}
	}
	handed := map[string]string{}
	for _, m := range h.msgs(bus.StreamPods, "pod.bound.*") {
		b := bustest.Decode(h.t, m, &pb.PodBinding{})
		uid := b.GetPod().GetMetadata().GetUid()
		if prev, ok := handed[uid]; ok {
			h.t.Errorf("pod %s handed to agents twice (%s, %s)", uid, prev, b.GetNode())
		}
		handed[uid] = b.GetNode()
	}
	if len(handed) != bound {
		h.t.Errorf("%d pod.bound messages for %d bound pods", len(handed), bound)
	}
	return bound
}
