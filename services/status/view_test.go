package status

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// countingKV counts the reads of a bucket.
type countingKV struct {
	jetstream.KeyValue
	gets atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.gets.Add(1)
	return c.KeyValue.Get(ctx, key)
}

// Unchanged heartbeats after the first read neither the node nor its lease: both are judged against
// the view, which the replica's own writes keep current.
func TestUnchangedHeartbeatsReadNothing(t *testing.T) {
	i := newIdle(t, Config{})
	nodes, leases := &countingKV{KeyValue: i.s.nodes}, &countingKV{KeyValue: i.s.leases}
	i.s.nodes, i.s.leases = nodes, leases
	base := time.Now().Add(-10 * time.Minute)
	st := agentState{cpu: "4"}
	i.handle(st.heartbeat("n1", base), base)
	const beats = 20
	_, lease0 := i.revs("n1")
	nodes.gets.Store(0)
	leases.gets.Store(0)
	for k := 1; k <= beats; k++ {
		at := base.Add(time.Duration(k) * 10 * time.Second)
		i.handle(st.heartbeat("n1", at), at)
	}
	n, l := nodes.gets.Load(), leases.gets.Load()
	_, lease1 := i.revs("n1")
	if n != 0 || l != 0 {
		t.Errorf("%d unchanged heartbeats read the node %d times and the lease %d times, want 0", beats, n, l)
	}
	if lease1-lease0 != beats {
		t.Errorf("%d lease renewals, want %d", lease1-lease0, beats)
	}
}

// A view that lags another writer costs a conflict and a read, not the other writer's change: a label
// set on the node behind the replica's back survives a heartbeat that changes the status, and a lease
// renewed elsewhere is not renewed back to an older time.
func TestStaleViewLosesNoWrite(t *testing.T) {
	i := newIdle(t, Config{})
	ctx := context.Background()
	base := time.Now().Add(-10 * time.Minute)
	st := agentState{cpu: "4"}
	i.handle(st.heartbeat("n1", base), base)

	n := i.node("n1")
	n.Metadata.Labels["team"] = "blue"
	if _, err := bus.Update(ctx, i.s.nodes, bus.NodeKey("n1"), n, i.rev(i.s.nodes, bus.NodeKey("n1"))); err != nil {
		t.Fatal(err)
	}
	later := base.Add(time.Minute)
	l := i.lease("n1")
	l.RenewTime = timestamppb.New(later)
	if _, err := bus.Update(ctx, i.s.leases, bus.LeaseKey("n1"), l, i.rev(i.s.leases, bus.LeaseKey("n1"))); err != nil {
		t.Fatal(err)
	}

	st.cpu = "8"
	at := base.Add(10 * time.Second)
	i.handle(st.heartbeat("n1", at), at)
	got := i.node("n1")
	if got.GetMetadata().GetLabels()["team"] != "blue" || got.GetStatus().GetCapacity()["cpu"] != "8" {
		t.Errorf("node after the heartbeat: labels %v, cpu %s; want team=blue and cpu 8",
			got.GetMetadata().GetLabels(), got.GetStatus().GetCapacity()["cpu"])
	}
	if rt := i.lease("n1").GetRenewTime().AsTime(); !rt.Equal(later) {
		t.Errorf("lease renew time %s, want the later %s", rt, later)
	}
}

// Once this replica's monitor marks a node Unknown, the node's next heartbeat writes it Ready again,
// though nothing but the times differs from what the agent sent before: the same heartbeat judged
// unchanged against the node's earlier revision is judged again against the new one.
func TestHeartbeatAfterUnknownWritesReady(t *testing.T) {
	i := newIdle(t, Config{})
	base := time.Now().Add(-10 * time.Minute)
	st := agentState{cpu: "4"}
	i.handle(st.heartbeat("n1", base), base)
	node0, _ := i.revs("n1")
	i.handle(st.heartbeat("n1", base.Add(10*time.Second)), base.Add(10*time.Second))
	if node1, _ := i.revs("n1"); node1 != node0 {
		t.Fatal("an unchanged heartbeat wrote the node")
	}
	key := bus.NodeKey("n1")
	c, ok := i.s.view.node(key)
	if !ok {
		t.Fatal("node not in the view after its registration")
	}
	if err := i.s.markUnknown(context.Background(), key, c, base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := podutil.NodeCondition(i.node("n1"), podutil.NodeReady).GetStatus(); got != podutil.Unknown {
		t.Fatalf("Ready %s after markUnknown, want Unknown", got)
	}
	at := base.Add(70 * time.Second)
	i.handle(st.heartbeat("n1", at), at)
	if got := podutil.NodeCondition(i.node("n1"), podutil.NodeReady).GetStatus(); got != podutil.True {
		t.Errorf("Ready %s after the next heartbeat, want True", got)
	}
}

// The view keeps the latest revision: an older copy arriving late (a watch behind the replica's own
// write) does not replace it, and a deletion hides the node from heartbeats until it is created again.
func TestNodeViewKeepsLatest(t *testing.T) {
	v := newNodeView()
	a, b := &pb.Node{Metadata: &pb.ObjectMeta{Name: "a"}}, &pb.Node{Metadata: &pb.ObjectMeta{Name: "b"}}
	v.setNode("n1", b, 7)
	v.setNode("n1", a, 5)
	if c, ok := v.node("n1"); !ok || c.node != b || c.rev != 7 {
		t.Errorf("after a late older copy: %v %v, want b at 7", c, ok)
	}
	v.setNode("n1", nil, 8)
	if _, ok := v.node("n1"); ok {
		t.Error("deleted node still in the view")
	}
	v.setNode("n1", b, 7)
	if _, ok := v.node("n1"); ok {
		t.Error("a copy older than the deletion brought the node back")
	}
	v.setNode("n1", a, 9)
	if c, ok := v.node("n1"); !ok || c.node != a {
		t.Errorf("after re-creation: %v %v, want a at 9", c, ok)
	}
}
