package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	st "github.com/podbus/podbus/sched/schedtest"
)

const wait = 10 * time.Second

// harness is an embedded server, the buckets, a recorder of pod.pending and pod.scheduled, and a
// publisher standing in for the store.
type harness struct {
	t       *testing.T
	url     string
	conn    *bus.Conn
	buckets bus.Buckets
	store   *bus.Publisher

	mu        sync.Mutex
	decisions map[string][]recorded // by uid
	pending   map[string][]recorded
}

type recorded struct {
	header nats.Header
	pos    uint64 // bus.Position of the message (batch entries have their own)
	dec    *pb.SchedulingDecision
	pend   *pb.PendingPod
}

func newHarness(t *testing.T) *harness {
	srv, conn := bustest.Start(t)
	ctx := context.Background()
	b, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: srv.ClientURL(), conn: conn, buckets: b, store: bus.NewPublisher(conn.JS, "store/test"),
		decisions: map[string][]recorded{}, pending: map[string][]recorded{}}
	cons, err := conn.JS.OrderedConsumer(ctx, bus.StreamPods, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.SubjPodScheduled, bus.SubjPodPendingAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, _ := m.Metadata()
		entries, err := bus.Unbatch(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Errorf("%s: %v", m.Subject(), err)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for i, e := range entries {
			r := recorded{header: e.Header, pos: bus.Position(md.Sequence.Stream, i)}
			uid := e.Header.Get(bus.HdrPodUID)
			if m.Subject() == bus.SubjPodScheduled {
				r.dec = &pb.SchedulingDecision{}
				if err := proto.Unmarshal(e.Data, r.dec); err != nil {
					t.Errorf("decision: %v", err)
				}
				h.decisions[uid] = append(h.decisions[uid], r)
			} else {
				r.pend = &pb.PendingPod{}
				if err := proto.Unmarshal(e.Data, r.pend); err != nil {
					t.Errorf("pending: %v", err)
				}
				h.pending[uid] = append(h.pending[uid], r)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return h
}

// start runs a scheduler replica until the test ends and waits until its cache is synced.
func (h *harness) start(id string, backoff time.Duration) *Service {
	h.t.Helper()
	s, _ := h.startConfig(Config{ID: id, Workers: 2, RequeueBackoff: backoff})
	return s
}

// startConfig is start with a whole configuration; stop ends the replica before the test does.
func (h *harness) startConfig(cfg Config) (s *Service, stop func()) {
	h.t.Helper()
	s, err := New(cfg, bustest.Conn(h.t, h.url, cfg.ID))
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("Run: %v", err)
			}
		})
	}
	h.t.Cleanup(stop)
	select {
	case <-s.ready:
	case err := <-done:
		h.t.Fatalf("Run returned early: %v", err)
	case <-time.After(wait):
		h.t.Fatal("scheduler cache never synced")
	}
	return s, stop
}

func (h *harness) putNode(n *pb.Node) uint64 {
	h.t.Helper()
	data, _ := proto.Marshal(n)
	rev, err := h.buckets.Nodes.Put(context.Background(), bus.NodeKey(n.Metadata.Name), data)
	if err != nil {
		h.t.Fatal(err)
	}
	return rev
}

// putAlloc fakes the binder: it commits exactly pods (uid -> requests) on node, one key each.
func (h *harness) putAlloc(node string, pods map[string]*pb.Pod) {
	h.t.Helper()
	ctx := context.Background()
	if keys, err := h.buckets.Alloc.ListKeysFiltered(ctx, bus.AllocNodeFilter(node)); err == nil {
		for key := range keys.Keys() {
			if _, uid, ok := bus.SplitAllocKey(key); ok && pods[uid] == nil {
				if err := h.buckets.Alloc.Delete(ctx, key); err != nil {
					h.t.Fatal(err)
				}
			}
		}
	}
	for uid, p := range pods {
		pa := &pb.PodAllocation{Namespace: p.Metadata.Namespace, Name: p.Metadata.Name, Requests: podutil.PodRequests(p)}
		data, _ := proto.Marshal(pa)
		if _, err := h.buckets.Alloc.Put(ctx, bus.AllocPodKey(node, uid), data); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) publishPending(p *pb.Pod, rev uint64) {
	h.t.Helper()
	md := p.Metadata
	err := h.store.Publish(context.Background(), bus.SubjPodPending, &pb.PendingPod{Pod: p, Revision: rev, Cause: "created"}, bus.Meta{
		MsgID: fmt.Sprintf("pending-%s-%d", md.Uid, rev), PodUID: md.Uid, Key: md.Namespace + "/" + md.Name,
		Correlation: p.GetInternal().GetCorrelationId(),
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// decision waits for the n-th decision (1-based) about uid.
func (h *harness) decision(uid string, n int) recorded {
	h.t.Helper()
	var r recorded
	bustest.Eventually(h.t, wait, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.decisions[uid]) >= n {
			r = h.decisions[uid][n-1]
			return true
		}
		return false
	}, "decision %d for %s", n, uid)
	return r
}

func (h *harness) pendingFor(uid string) []recorded {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]recorded(nil), h.pending[uid]...)
}

func readyNode(name, cpu string) *pb.Node {
	return st.Node(name).Capacity(cpu, "8Gi", 110).Ready().Obj()
}

func TestScheduleUnschedulableAndRequeue(t *testing.T) {
	h := newHarness(t)
	h.putNode(readyNode("n1", "2"))
	s := h.start("a", 50*time.Millisecond)

	// 1. A fits on n1. The decision carries everything the binder needs.
	podA := st.Pod("a", "uid-a").Req("1", "1Gi").Obj()
	h.publishPending(podA, 7)
	dA := h.decision("uid-a", 1)
	want := &pb.SchedulingDecision{
		Uid: "uid-a", Namespace: "default", Name: "a", PodRevision: 7, Node: "n1", Scheduler: "scheduler/a",
		NodesEvaluated: 1, Requests: &pb.Resources{MilliCpu: 1000, Memory: 1 << 30, Pods: 1}, Pod: podA,
	}
	got := proto.Clone(dA.dec).(*pb.SchedulingDecision)
	if got.DecidedAt == nil || got.Score <= 0 {
		t.Errorf("decided_at %v, score %d", got.DecidedAt, got.Score)
	}
	got.DecidedAt, got.Score = nil, 0
	if !proto.Equal(want, got) {
		t.Errorf("decision\n got %v\nwant %v", got, want)
	}
	pendPos := h.pendingFor("uid-a")[0].pos
	wantHdr := map[string]string{
		bus.HdrMsgID: fmt.Sprintf("sched-uid-a-%d", pendPos), bus.HdrPodUID: "uid-a", bus.HdrKey: "default/a",
		bus.HdrCorrelation: "corr-uid-a", bus.HdrActor: "scheduler/a",
	}
	for k, v := range wantHdr {
		if g := dA.header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if s.cache.NumAssumed() != 1 {
		t.Errorf("assumed %d pods, want 1", s.cache.NumAssumed())
	}

	// 2. The binder commits A: the assumption gives way to the alloc record.
	h.putAlloc("n1", map[string]*pb.Pod{"uid-a": podA})
	bustest.Eventually(t, wait, func() bool { return s.cache.NumAssumed() == 0 }, "assumption of A dropped")

	// 3. B needs more cpu than is left: unschedulable, with Kubernetes' message.
	podB := st.Pod("b", "uid-b").Req("1500m", "").Obj()
	h.publishPending(podB, 8)
	dB := h.decision("uid-b", 1).dec
	if !dB.Unschedulable || dB.Node != "" || dB.Message != "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod." {
		t.Errorf("decision for B: %v", dB)
	}
	if diff := cmp.Diff(map[string]int32{"Insufficient cpu": 1}, dB.Reasons); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}

	// 4. A node is added: B goes back to pod.pending and lands on it.
	rev := h.putNode(readyNode("n2", "4"))
	dB2 := h.decision("uid-b", 2).dec
	if dB2.Unschedulable || dB2.Node != "n2" {
		t.Errorf("decision for B after n2 joined: %v", dB2)
	}
	requeues := h.pendingFor("uid-b")
	if len(requeues) != 2 {
		t.Fatalf("pending messages for B: %d", len(requeues))
	}
	rq := requeues[1]
	if rq.pend.Cause != CauseNodeChanged || rq.header.Get(bus.HdrMsgID) != fmt.Sprintf("retry-uid-b-n%d", rev) || rq.header.Get(bus.HdrActor) != "scheduler/a" {
		t.Errorf("requeue: cause %q id %q actor %q", rq.pend.Cause, rq.header.Get(bus.HdrMsgID), rq.header.Get(bus.HdrActor))
	}
	h.putAlloc("n2", map[string]*pb.Pod{"uid-b": podB})

	// 5. C needs 3 cpu: no node has it until B leaves n2 (the alloc record shrinks). n1 has only 2
	// cores, so preemption could not help there at all.
	podC := st.Pod("c", "uid-c").Req("3", "").Obj()
	h.publishPending(podC, 9)
	if dC := h.decision("uid-c", 1).dec; dC.Message != "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: "+
		"1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling." {
		t.Errorf("decision for C: %v", dC)
	}
	h.putAlloc("n2", map[string]*pb.Pod{})
	// B's commit on n2 (step 4's alloc record) may itself wake C once more before B leaves, on a view
	// where it still does not fit; the decision after B left is the first that is not unschedulable.
	var dC *pb.SchedulingDecision
	for n := 2; n <= 4; n++ {
		if dC = h.decision("uid-c", n).dec; !dC.Unschedulable {
			break
		}
	}
	if dC.Node != "n2" {
		t.Errorf("decision for C after B left: %v", dC)
	}
	if s.parks.Len() != 0 {
		t.Errorf("%d pods still parked", s.parks.Len())
	}
}

func TestSkipsDeletingPodsAndNoNodes(t *testing.T) {
	h := newHarness(t)
	h.start("a", 50*time.Millisecond)

	deleting := st.Pod("gone", "uid-gone").Obj()
	deleting.Metadata.DeletionTimestamp = timestamppb.Now()
	h.publishPending(deleting, 1)
	h.publishPending(st.Pod("p", "uid-p").Obj(), 2)
	d := h.decision("uid-p", 1).dec
	if !d.Unschedulable || d.Message != "no nodes available to schedule pods" {
		t.Errorf("decision: %v", d)
	}
	// Messages are handled in stream order per worker, and uid-p's decision came after; but the two
	// pods may land on different workers, so wait for the skip to be acked rather than assume it.
	bustest.Eventually(t, wait, func() bool {
		info, err := h.conn.JS.Consumer(context.Background(), bus.StreamPods, bus.ConsumerScheduler)
		if err != nil {
			return false
		}
		ci, err := info.Info(context.Background())
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
	}, "pending messages acked")
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.decisions["uid-gone"]); n != 0 {
		t.Errorf("%d decisions for a pod being deleted", n)
	}
}

func TestNewReplicaRequeuesUnschedulablePods(t *testing.T) {
	h := newHarness(t)
	h.putNode(readyNode("n1", "4"))
	// A pod the binder marked unschedulable while no scheduler was around to see n1 join.
	p := st.Pod("waiting", "uid-w").Req("1", "").Obj()
	p.Status.Conditions = []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.False, Reason: "Unschedulable"}}
	bound := st.Pod("bound", "uid-b").NodeName("n1").Obj()
	bound.Status.Conditions = []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.True}}
	for _, x := range []*pb.Pod{p, bound} {
		if _, err := bus.Create(context.Background(), h.buckets.Pods, bus.PodKey(x.Metadata.Namespace, x.Metadata.Name), x); err != nil {
			t.Fatal(err)
		}
	}
	// Two replicas start on the same state: the pod is requeued once (same message id).
	h.start("a", time.Second)
	h.start("b", time.Second)
	if d := h.decision("uid-w", 1); d.dec.Node != "n1" {
		t.Errorf("decision: %v", d.dec)
	}
	pend := h.pendingFor("uid-w")
	if len(pend) != 1 || !strings.HasPrefix(pend[0].header.Get(bus.HdrMsgID), "retry-uid-w-s") {
		t.Errorf("pending messages: %d, first id %q", len(pend), pend[0].header.Get(bus.HdrMsgID))
	}
	if n := len(h.pendingFor("uid-b")); n != 0 {
		t.Errorf("bound pod requeued %d times", n)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	if _, err := New(Config{}, &bus.Conn{}); !errors.Is(err, ErrConfig) {
		t.Errorf("err = %v", err)
	}
}

// A pod the binder refused for room comes back naming the alloc revision that refused it: a replica
// whose cache has not seen that revision waits (nak with a short delay) instead of repeating the stale
// choice, and goes ahead once it has.
func TestConflictRequeueWaitsForTheCache(t *testing.T) {
	h := newHarness(t)
	s, err := New(Config{ID: "a"}, h.conn)
	if err != nil {
		t.Fatal(err)
	}
	pp := &pb.PendingPod{Pod: st.Pod("p", "uid-p").Obj(), Revision: 3, Cause: CauseConflict}
	data, _ := proto.Marshal(pp)
	msg := func(delivered uint64) *bus.Msg {
		return &bus.Msg{Subject: bus.SubjPodPending, Data: data, Delivered: delivered, StreamSeq: 7,
			Meta: bus.Meta{MsgID: "conflict-uid-p-5", PodUID: "uid-p", Trigger: "a40"}}
	}
	ctx := context.Background()
	s.cache.UpsertAlloc("n1", &pb.NodeAllocation{Node: "n1"}, 39)
	waits := metrics.Counter("scheduler.cache_waits")
	var re *bus.RetryError
	if err := s.handlePending(ctx, msg(1)); !errors.As(err, &re) || !errors.Is(err, errCacheBehind) {
		t.Fatalf("behind the refusing revision: %v, want a retry for errCacheBehind", err)
	}
	if got := metrics.Counter("scheduler.cache_waits") - waits; got != 1 {
		t.Errorf("cache_waits grew by %d, want 1", got)
	}
	s.cache.UpsertAlloc("n1", &pb.NodeAllocation{Node: "n1"}, 40)
	if err := s.handlePending(ctx, msg(2)); err != nil {
		t.Fatalf("after the cache caught up: %v", err)
	}
	if d := h.decision("uid-p", 1).dec; !d.GetUnschedulable() {
		t.Errorf("decision = %v, want unschedulable (no nodes)", d)
	}
}

// A pod parked as unschedulable by a replica that then dies is taken over by a replica that was already
// running: it tracks every pod waiting for a node, not only those it judged, and sends it back once
// it has waited UnschedulableFlush; the node that joined meanwhile gets it.
func TestUnschedulablePodOfADeadReplicaIsTakenOver(t *testing.T) {
	h := newHarness(t)
	h.putNode(readyNode("n1", "1"))
	cfg := func(id string) Config {
		return Config{ID: id, Workers: 2, RequeueBackoff: 50 * time.Millisecond, UnschedulableFlush: 300 * time.Millisecond}
	}
	_, stopA := h.startConfig(cfg("a"))
	p := st.Pod("big", "uid-big").Req("2", "").Obj()
	key := bus.PodKey(p.Metadata.Namespace, p.Metadata.Name)
	rev, err := bus.Create(context.Background(), h.buckets.Pods, key, p)
	if err != nil {
		t.Fatal(err)
	}
	h.publishPending(p, rev)
	if d := h.decision("uid-big", 1); !d.dec.GetUnschedulable() || d.dec.GetScheduler() != "scheduler/a" {
		t.Fatalf("first decision: %v", d.dec)
	}
	// b runs before the pod is marked, so it did not find it at start.
	b, _ := h.startConfig(cfg("b"))
	<-b.tracking
	// The binder's part: the pod waits for a node.
	marked := proto.Clone(p).(*pb.Pod)
	marked.Status.Conditions = []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.False, Reason: "Unschedulable"}}
	if _, err := bus.Update(context.Background(), h.buckets.Pods, key, marked, rev); err != nil {
		t.Fatal(err)
	}
	stopA()
	h.putNode(readyNode("n2", "4"))
	bustest.Eventually(t, wait, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, d := range h.decisions["uid-big"] {
			if d.dec.GetNode() == "n2" {
				return d.dec.GetScheduler() == "scheduler/b"
			}
		}
		return false
	}, "replica b places the pod a had parked")
}
