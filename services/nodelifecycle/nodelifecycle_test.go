package nodelifecycle

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
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

const wait = 10 * time.Second

type env struct {
	t           *testing.T
	conn        *bus.Conn
	nodes, pods jetstream.KeyValue
}

func setup(t *testing.T) *env {
	t.Helper()
	_, conn := bustest.Start(t)
	e := &env{t: t, conn: conn}
	var err error
	ctx := context.Background()
	if e.nodes, err = bus.OpenBucket(ctx, conn.JS, bus.BucketNodes); err != nil {
		t.Fatal(err)
	}
	if e.pods, err = bus.OpenBucket(ctx, conn.JS, bus.BucketPods); err != nil {
		t.Fatal(err)
	}
	return e
}

// run starts a replica until the test ends.
func (e *env) run(cfg Config) {
	e.t.Helper()
	s, err := New(cfg, e.conn)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Run(ctx); err != nil {
			e.t.Errorf("run: %v", err)
		}
	}()
	e.t.Cleanup(func() { cancel(); wg.Wait() })
}

// setReady writes the node's Ready condition (creating the node), keeping its spec.
func (e *env) setReady(name, status string, taints ...*pb.Taint) {
	e.t.Helper()
	ctx := context.Background()
	key := bus.NodeKey(name)
	for range 16 {
		n := &pb.Node{}
		rev, err := bus.Get(ctx, e.nodes, key, n)
		if errors.Is(err, bus.ErrNotFound) {
			n = &pb.Node{Metadata: &pb.ObjectMeta{Name: name, Uid: "uid-" + name}, Spec: &pb.NodeSpec{Taints: taints}}
		} else if err != nil {
			e.t.Fatal(err)
		}
		n.Status = &pb.NodeStatus{Conditions: []*pb.NodeCondition{{Type: podutil.NodeReady, Status: status}}}
		if rev == 0 {
			_, err = bus.Create(ctx, e.nodes, key, n)
		} else {
			_, err = bus.Update(ctx, e.nodes, key, n, rev)
		}
		if err == nil {
			return
		}
	}
	e.t.Fatalf("could not write node %s", name)
}

func (e *env) node(name string) *pb.Node {
	e.t.Helper()
	n := &pb.Node{}
	if _, err := bus.Get(context.Background(), e.nodes, bus.NodeKey(name), n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) pod(name, node string, tolerations ...*pb.Toleration) {
	e.t.Helper()
	p := &pb.Pod{Metadata: &pb.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
		Spec: &pb.PodSpec{NodeName: node, Tolerations: tolerations}}
	if _, err := bus.Create(context.Background(), e.pods, bus.PodKey("default", name), p); err != nil {
		e.t.Fatal(err)
	}
}

// deletes are the delete commands stored, by pod name (the stream keeps one per message id).
func (e *env) deletes() map[string]*pb.PodCommand {
	out := map[string]*pb.PodCommand{}
	for _, m := range bustest.Messages(e.t, e.conn, bus.StreamPods, bus.SubjPodDelete) {
		c := bustest.Decode(e.t, m, &pb.PodCommand{})
		if _, dup := out[c.GetPod().GetMetadata().GetName()]; dup {
			e.t.Errorf("pod %s deleted twice", c.GetPod().GetMetadata().GetName())
		}
		out[c.GetPod().GetMetadata().GetName()] = c
	}
	return out
}

func (e *env) evictionEvents() map[string]int {
	out := map[string]int{}
	for _, m := range bustest.Messages(e.t, e.conn, bus.StreamEvents, bus.SubjAllEvents) {
		ev := bustest.Decode(e.t, m, &pb.Event{})
		if ev.GetReason() == podutil.ReasonTaintManagerEviction {
			out[ev.GetInvolvedObject().GetName()]++
		}
	}
	return out
}

func taintSet(n *pb.Node) map[string]bool {
	out := map[string]bool{}
	for _, t := range n.GetSpec().GetTaints() {
		out[t.GetKey()+":"+t.GetEffect()] = true
	}
	return out
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// A node's lifecycle taints follow its Ready condition; taints put there by users stay.
func TestTaintsFollowReady(t *testing.T) {
	e := setup(t)
	e.run(Config{ID: "r1"})
	user := &pb.Taint{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}
	e.setReady("n1", podutil.True, user)
	steps := []struct {
		ready string
		want  []string
	}{
		{podutil.False, []string{"node.kubernetes.io/not-ready:NoSchedule", "node.kubernetes.io/not-ready:NoExecute"}},
		{podutil.Unknown, []string{"node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"}},
		{podutil.True, nil},
		{podutil.Unknown, []string{"node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"}},
		{podutil.True, nil},
	}
	for i, st := range steps {
		e.setReady("n1", st.ready)
		want := map[string]bool{"dedicated:NoSchedule": true}
		for _, k := range st.want {
			want[k] = true
		}
		bustest.Eventually(t, wait, func() bool { return sameSet(taintSet(e.node("n1")), want) },
			"step %d (Ready=%s): taints %v, want %v", i, st.ready, taintSet(e.node("n1")), want)
		for _, tn := range e.node("n1").GetSpec().GetTaints() {
			if tn.GetEffect() == "NoExecute" && tn.TimeAdded == nil {
				t.Errorf("step %d: NoExecute taint %s without timeAdded", i, tn.GetKey())
			}
		}
	}
}

func tolerate(key string, secs *int64) *pb.Toleration {
	return &pb.Toleration{Key: key, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: secs}
}

// On an unreachable node: a pod without toleration goes at once, one tolerating for a second goes
// after it, one tolerating forever stays; each with one forced delete and one event. A pod on a
// Ready node is untouched.
func TestEvictsIntolerantPods(t *testing.T) {
	e := setup(t)
	e.setReady("n1", podutil.True)
	e.setReady("n2", podutil.True)
	e.pod("bare", "n1")
	e.pod("brief", "n1", tolerate(podutil.TaintNodeUnreachable, proto.Int64(1)))
	e.pod("forever", "n1", tolerate(podutil.TaintNodeUnreachable, nil))
	e.pod("elsewhere", "n2")
	e.run(Config{ID: "r1"})
	e.setReady("n1", podutil.Unknown)
	bustest.Eventually(t, wait, func() bool { return len(e.deletes()) == 2 }, "evictions: %v", e.deletes())
	d := e.deletes()
	for _, name := range []string{"bare", "brief"} {
		c := d[name]
		if c == nil {
			t.Fatalf("%s not evicted; evicted %v", name, d)
		}
		if c.GetReason() != podutil.ReasonTaintManagerEviction || c.GetPreconditionUid() != "uid-"+name ||
			c.GracePeriodSeconds == nil || c.GetGracePeriodSeconds() != 0 {
			t.Errorf("%s: delete command %v", name, c)
		}
	}
	// "forever" would have gone before "brief" had it been given a deadline.
	if d["forever"] != nil || d["elsewhere"] != nil {
		t.Errorf("evicted %v", d)
	}
	bustest.Eventually(t, wait, func() bool { return len(e.evictionEvents()) == 2 }, "events %v", e.evictionEvents())
	if ev := e.evictionEvents(); ev["bare"] != 1 || ev["brief"] != 1 {
		t.Errorf("events %v", ev)
	}
}

// A not-ready node's agent is alive: its pods are deleted with their own grace period.
func TestNotReadyEvictionIsGraceful(t *testing.T) {
	e := setup(t)
	e.setReady("n1", podutil.True)
	e.pod("web", "n1")
	e.run(Config{ID: "r1"})
	e.setReady("n1", podutil.False)
	bustest.Eventually(t, wait, func() bool { return e.deletes()["web"] != nil }, "web not evicted")
	if c := e.deletes()["web"]; c.GracePeriodSeconds != nil {
		t.Errorf("grace = %d, want the pod's own", c.GetGracePeriodSeconds())
	}
}

// Two replicas evict every pod, each once.
func TestTwoReplicasEvictOnce(t *testing.T) {
	e := setup(t)
	e.setReady("n1", podutil.True)
	const n = 20
	for i := range n {
		e.pod(fmt.Sprintf("p%d", i), "n1")
	}
	e.run(Config{ID: "r1", EvictionRate: 1000})
	e.run(Config{ID: "r2", EvictionRate: 1000})
	e.setReady("n1", podutil.Unknown)
	bustest.Eventually(t, wait, func() bool { return len(e.deletes()) == n }, "evictions: %d", len(e.deletes()))
	bustest.Eventually(t, wait, func() bool { return len(e.evictionEvents()) == n }, "events: %d", len(e.evictionEvents()))
	for name, c := range e.evictionEvents() {
		if c != 1 {
			t.Errorf("%s: %d events", name, c)
		}
	}
}

// With a bucket of one token refilled slowly, one pod is evicted and the others wait for tokens.
func TestEvictionRateLimited(t *testing.T) {
	e := setup(t)
	e.setReady("n1", podutil.True)
	for i := range 3 {
		e.pod(fmt.Sprintf("p%d", i), "n1")
	}
	limited := metrics.Counter("nodelifecycle.evictions.ratelimited")
	e.run(Config{ID: "r1", EvictionRate: 0.0001, EvictionBurst: 1})
	e.setReady("n1", podutil.Unknown)
	bustest.Eventually(t, wait, func() bool {
		return len(e.deletes()) == 1 && metrics.Counter("nodelifecycle.evictions.ratelimited")-limited >= 2
	}, "evictions %d, rate-limited %d", len(e.deletes()), metrics.Counter("nodelifecycle.evictions.ratelimited")-limited)
	if got := len(e.deletes()); got != 1 {
		t.Errorf("evictions = %d, want 1", got)
	}
}

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newTokenBucket(2, 2) // 2/s, burst 2
	steps := []struct {
		at   time.Duration
		ok   bool
		wait time.Duration
	}{
		{0, true, 0},
		{0, true, 0},
		{0, false, 500 * time.Millisecond},
		{250 * time.Millisecond, false, 250 * time.Millisecond},
		{500 * time.Millisecond, true, 0},
		{10 * time.Second, true, 0},
		{10 * time.Second, true, 0},
		{10 * time.Second, false, 500 * time.Millisecond},
	}
	for i, st := range steps {
		wait, ok := b.take(t0.Add(st.at))
		if ok != st.ok || wait != st.wait {
			t.Errorf("step %d at %s: (%s, %v), want (%s, %v)", i, st.at, wait, ok, st.wait, st.ok)
		}
	}
}

func TestTaintDeadline(t *testing.T) {
	added := time.Unix(1000, 0)
	taint := &pb.Taint{Key: podutil.TaintNodeNotReady, Effect: "NoExecute", TimeAdded: timestamppb.New(added)}
	tests := []struct {
		name string
		tols []*pb.Toleration
		want time.Duration // -1: never
	}{
		{"none", nil, 0},
		{"other key", []*pb.Toleration{tolerate("other", proto.Int64(5))}, 0},
		{"forever", []*pb.Toleration{tolerate(podutil.TaintNodeNotReady, nil)}, -1},
		{"300s", []*pb.Toleration{tolerate(podutil.TaintNodeNotReady, proto.Int64(300))}, 300 * time.Second},
		{"shortest wins", []*pb.Toleration{tolerate("", proto.Int64(60)), tolerate(podutil.TaintNodeNotReady, proto.Int64(30))}, 30 * time.Second},
		{"bounded beats forever", []*pb.Toleration{tolerate("", nil), tolerate(podutil.TaintNodeNotReady, proto.Int64(30))}, 30 * time.Second},
		{"negative is now", []*pb.Toleration{tolerate(podutil.TaintNodeNotReady, proto.Int64(-4))}, 0},
		{"NoSchedule toleration", []*pb.Toleration{{Key: podutil.TaintNodeNotReady, Operator: "Exists", Effect: "NoSchedule"}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at, ok := taintDeadline(tc.tols, taint)
			if tc.want < 0 {
				if ok {
					t.Errorf("deadline %s, want none", at)
				}
				return
			}
			if !ok || !at.Equal(added.Add(tc.want)) {
				t.Errorf("deadline (%s, %v), want %s", at, ok, added.Add(tc.want))
			}
		})
	}
}
