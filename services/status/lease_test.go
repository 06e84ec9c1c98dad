package status

import (
	"context"
	"errors"
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

// idle is a status replica whose handlers the test calls itself, with no consumer or monitor running.
type idle struct {
	t testing.TB
	s *Service
}

func newIdle(t testing.TB, cfg Config) *idle {
	t.Helper()
	_, conn := bustest.Start(t)
	ctx := context.Background()
	b, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ID = "idle"
	s, err := New(cfg, conn)
	if err != nil {
		t.Fatal(err)
	}
	s.pods, s.nodes = b.Pods, b.Nodes
	if s.leases, err = bus.OpenBucket(ctx, conn.JS, bus.BucketLeases); err != nil {
		t.Fatal(err)
	}
	return &idle{t: t, s: s}
}

// handle hands hb to the heartbeat handler as the bus would, stored at at.
func (i *idle) handle(hb *pb.NodeHeartbeat, at time.Time) {
	i.t.Helper()
	data, err := proto.Marshal(hb)
	if err != nil {
		i.t.Fatal(err)
	}
	m := &bus.Msg{Subject: bus.SubjHeartbeat(hb.GetNode().GetMetadata().GetName()), Data: data, Time: at}
	if err := i.s.handleHeartbeat(context.Background(), m); err != nil {
		i.t.Fatal(err)
	}
}

// revs are the revisions of name's node and lease, 0 for one that does not exist. A bucket's revisions
// are its stream's sequence: with one key, their difference counts the writes in between.
func (i *idle) revs(name string) (node, lease uint64) {
	i.t.Helper()
	return i.rev(i.s.nodes, bus.NodeKey(name)), i.rev(i.s.leases, bus.LeaseKey(name))
}

func (i *idle) rev(kv jetstream.KeyValue, key string) uint64 {
	i.t.Helper()
	e, err := kv.Get(context.Background(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0
	}
	if err != nil {
		i.t.Fatal(err)
	}
	return e.Revision()
}

func (i *idle) node(name string) *pb.Node {
	i.t.Helper()
	var n pb.Node
	if _, err := bus.Get(context.Background(), i.s.nodes, bus.NodeKey(name), &n); err != nil {
		i.t.Fatal(err)
	}
	return &n
}

func (i *idle) lease(name string) *pb.NodeLease {
	i.t.Helper()
	var l pb.NodeLease
	if _, err := bus.Get(context.Background(), i.s.leases, bus.LeaseKey(name), &l); err != nil {
		i.t.Fatal(err)
	}
	return &l
}

// agentState is what a simulated agent posts; each heartbeat carries all of it.
type agentState struct {
	cpu         string
	memPressure bool
	zone        string
}

func (a agentState) heartbeat(name string, at time.Time) *pb.NodeHeartbeat {
	hb := heartbeat(name, at)
	hb.Node.Status.Capacity["cpu"] = a.cpu
	if a.zone != "" {
		hb.Node.Metadata.Labels["topology.kubernetes.io/zone"] = a.zone
	}
	status, reason := podutil.False, "KubeletHasSufficientMemory"
	if a.memPressure {
		status, reason = podutil.True, "KubeletHasInsufficientMemory"
	}
	hb.Node.Status.Conditions = append(hb.Node.Status.Conditions, &pb.NodeCondition{Type: "MemoryPressure",
		Status: status, Reason: reason, LastHeartbeatTime: timestamppb.New(at), LastTransitionTime: timestamppb.New(at)})
	return hb
}

// A heartbeat renews the lease; the node is written at registration, when anything but the heartbeat
// times changed, and once its stored heartbeat is NodeStatusReportFrequency old. Heartbeats the lease
// already covers (redeliveries, replays) change nothing.
//
// Heartbeats with the agent's digest of their status give the same writes: the unchanged ones are
// judged by the digest, without decoding the node.
func TestHeartbeatWritesNodeOnlyOnChange(t *testing.T) {
	for _, digest := range []bool{false, true} {
		name := "decoded"
		if digest {
			name = "by digest"
		}
		t.Run(name, func(t *testing.T) { testHeartbeatWrites(t, digest) })
	}
}

func testHeartbeatWrites(t *testing.T, digest bool) {
	const report = time.Minute
	i := newIdle(t, Config{NodeStatusReportFrequency: report})
	base := time.Now().Add(-10 * time.Minute)
	st := agentState{cpu: "4"}
	for _, step := range []struct {
		name                string
		at                  time.Duration // after base, as the bus dates it
		change              func(*agentState)
		wantNode, wantLease bool
	}{
		{name: "registration", at: 0, wantNode: true, wantLease: true},
		{name: "unchanged", at: 10 * time.Second, wantLease: true},
		{name: "unchanged again", at: 20 * time.Second, wantLease: true},
		{name: "memory pressure", at: 30 * time.Second, change: func(a *agentState) { a.memPressure = true }, wantNode: true, wantLease: true},
		{name: "still under pressure", at: 40 * time.Second, wantLease: true},
		{name: "capacity", at: 50 * time.Second, change: func(a *agentState) { a.cpu = "8" }, wantNode: true, wantLease: true},
		{name: "redelivered older", at: 45 * time.Second, change: func(a *agentState) { a.cpu = "2" }},
		{name: "redelivered same time", at: 50 * time.Second, change: func(a *agentState) { a.cpu = "2" }},
		{name: "back to current", at: 60 * time.Second, change: func(a *agentState) { a.cpu = "8" }, wantLease: true},
		{name: "agent label", at: 70 * time.Second, change: func(a *agentState) { a.zone = "z1" }, wantNode: true, wantLease: true},
		{name: "just under report frequency", at: 70*time.Second + report - time.Second, wantLease: true},
		{name: "report frequency reached", at: 70*time.Second + report, wantNode: true, wantLease: true},
		{name: "unchanged after report", at: 80*time.Second + report, wantLease: true},
	} {
		if step.change != nil {
			step.change(&st)
		}
		at := base.Add(step.at)
		node0, lease0 := i.revs("n1")
		hb := st.heartbeat("n1", at)
		if digest {
			withDigest(hb)
		}
		i.handle(hb, at)
		node1, lease1 := i.revs("n1")
		if got := node1 != node0; got != step.wantNode {
			t.Errorf("%s: node written %v, want %v", step.name, got, step.wantNode)
		}
		if got := lease1 != lease0; got != step.wantLease {
			t.Errorf("%s: lease renewed %v, want %v", step.name, got, step.wantLease)
		}
	}
	n := i.node("n1")
	if cpu := n.GetStatus().GetCapacity()["cpu"]; cpu != "8" {
		t.Errorf("cpu %s, want 8: a redelivered heartbeat was applied", cpu)
	}
	if c := podutil.NodeCondition(n, "MemoryPressure"); c.GetStatus() != podutil.True {
		t.Errorf("MemoryPressure %v", c)
	}
	if got, want := heartbeatTime(n), base.Add(70*time.Second+report); !got.Equal(want) {
		t.Errorf("node heartbeat time %s, want %s", got, want)
	}
	if got, want := i.lease("n1").GetRenewTime().AsTime(), base.Add(80*time.Second+report); !got.Equal(want) {
		t.Errorf("lease renew time %s, want %s", got, want)
	}
}

// withDigest adds the agent's digest of hb's status to hb.
func withDigest(hb *pb.NodeHeartbeat) *pb.NodeHeartbeat {
	d, _ := podutil.NodeStatusDigest(hb.Node)
	hb.StatusDigest = d[:]
	return hb
}

// A heartbeat whose digest was applied at the node's revision renews the lease without reading or
// writing the node, whatever else the message carries; one with no digest, or a digest not seen, is
// decoded and applied.
func TestHeartbeatByDigestSkipsTheNode(t *testing.T) {
	i := newIdle(t, Config{})
	nodes := &countingKV{KeyValue: i.s.nodes}
	i.s.nodes = nodes
	base := time.Now().Add(-10 * time.Minute)
	st := agentState{cpu: "4"}
	first := withDigest(st.heartbeat("n1", base))
	i.handle(first, base)
	for _, step := range []struct {
		name     string
		hb       func(at time.Time) *pb.NodeHeartbeat
		wantNode bool
		wantCPU  string
	}{
		{"the digest applied, another status", func(at time.Time) *pb.NodeHeartbeat {
			hb := agentState{cpu: "16"}.heartbeat("n1", at)
			hb.StatusDigest = first.StatusDigest
			return hb
		}, false, "4"},
		{"a digest not seen", func(at time.Time) *pb.NodeHeartbeat { return withDigest(agentState{cpu: "8"}.heartbeat("n1", at)) }, true, "8"},
		{"no digest", func(at time.Time) *pb.NodeHeartbeat { return agentState{cpu: "2"}.heartbeat("n1", at) }, true, "2"},
		{"a digest too short", func(at time.Time) *pb.NodeHeartbeat {
			hb := agentState{cpu: "6"}.heartbeat("n1", at)
			hb.StatusDigest = []byte{1, 2, 3}
			return hb
		}, true, "6"},
	} {
		at := base.Add(time.Duration(len(step.name)) * time.Second)
		base = at
		node0, lease0 := i.revs("n1")
		nodes.gets.Store(0)
		i.handle(step.hb(at), at)
		reads := nodes.gets.Load()
		node1, lease1 := i.revs("n1")
		if got := node1 != node0; got != step.wantNode {
			t.Errorf("%s: node written %v, want %v", step.name, got, step.wantNode)
		}
		if lease1 == lease0 {
			t.Errorf("%s: lease not renewed", step.name)
		}
		if !step.wantNode && reads != 0 {
			t.Errorf("%s: node read %d times", step.name, reads)
		}
		if cpu := i.node("n1").GetStatus().GetCapacity()["cpu"]; cpu != step.wantCPU {
			t.Errorf("%s: cpu %s, want %s", step.name, cpu, step.wantCPU)
		}
	}
}

// Unchanged heartbeats of one node: how many node writes they cost, against one each before leases.
func TestUnchangedHeartbeatsWriteNoNode(t *testing.T) {
	i := newIdle(t, Config{})
	base := time.Now().Add(-10 * time.Minute)
	st := agentState{cpu: "4"}
	i.handle(st.heartbeat("n1", base), base)
	const beats = 20
	node0, lease0 := i.revs("n1")
	for k := 1; k <= beats; k++ {
		at := base.Add(time.Duration(k) * 10 * time.Second)
		i.handle(st.heartbeat("n1", at), at)
	}
	node1, lease1 := i.revs("n1")
	nodeWrites, leaseWrites := node1-node0, lease1-lease0
	t.Logf("%d unchanged heartbeats: %d node writes (%d before node leases), %d lease renewals", beats, nodeWrites, beats, leaseWrites)
	if nodeWrites != 0 || leaseWrites != beats {
		t.Errorf("%d node writes and %d lease renewals, want 0 and %d", nodeWrites, leaseWrites, beats)
	}
}

// The monitor keeps Ready a node whose lease alone is renewed, long after its record was last written,
// and marks it Unknown once its heartbeats stop.
func TestNodeMonitorHonoursLease(t *testing.T) {
	const grace = 2 * time.Second
	e := newEnvConfig(t, 2, Config{NodeMonitorGracePeriod: grace, MonitorInterval: 30 * time.Millisecond,
		NodeStatusReportFrequency: time.Hour})
	leases, err := bus.OpenBucket(context.Background(), e.conn.JS, bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			// Published with the test's own publisher: a failure shows as the node going Unknown.
			_ = e.pub.Publish(ctx, bus.SubjHeartbeat("n1"), heartbeat("n1", time.Now()), bus.Meta{})
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	bustest.Eventually(t, wait, func() bool { return e.node("n1") != nil }, "node registered")
	registered, err := e.nodes.Get(context.Background(), bus.NodeKey("n1"))
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the lease is renewed three grace periods after the record's heartbeat time.
	bustest.Eventually(t, 3*wait, func() bool {
		var l pb.NodeLease
		if _, err := bus.Get(context.Background(), leases, bus.LeaseKey("n1"), &l); err != nil {
			return false
		}
		return l.GetRenewTime().AsTime().Sub(heartbeatTime(e.node("n1"))) > 3*grace
	}, "lease renewed well past the node's heartbeat time")
	cur, err := e.nodes.Get(context.Background(), bus.NodeKey("n1"))
	if err != nil {
		t.Fatal(err)
	}
	if cur.Revision() != registered.Revision() {
		t.Fatalf("node written again (revision %d -> %d): %v", registered.Revision(), cur.Revision(), e.node("n1"))
	}
	stop()
	<-beating
	bustest.Eventually(t, 3*wait, func() bool {
		return podutil.NodeCondition(e.node("n1"), podutil.NodeReady).GetStatus() == podutil.Unknown
	}, "node marked Unknown once heartbeats stop")
}

// A node stored with a heartbeat time beyond the horizon (accepted before such heartbeats were refused)
// is rewritten by the next real heartbeat even if nothing else changed: the monitor would otherwise
// take it for alive until then.
func TestHeartbeatReplacesFutureHeartbeatTime(t *testing.T) {
	i := newIdle(t, Config{})
	st := agentState{cpu: "4"}
	future := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := bus.Create(context.Background(), i.s.nodes, bus.NodeKey("n1"), newNode(st.heartbeat("n1", future).Node)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	i.handle(st.heartbeat("n1", now), now)
	if got := heartbeatTime(i.node("n1")); !got.Equal(now) {
		t.Errorf("heartbeat time %s, want %s", got, now)
	}
}

func TestSameButHeartbeat(t *testing.T) {
	t0, t1 := timestamppb.New(time.Unix(1_700_000_000, 0)), timestamppb.New(time.Unix(1_700_000_010, 0))
	node := func(hb *timestamppb.Timestamp, mods ...func(*pb.Node)) *pb.Node {
		n := &pb.Node{
			Metadata: &pb.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}},
			Status: &pb.NodeStatus{Conditions: []*pb.NodeCondition{
				{Type: podutil.NodeReady, Status: podutil.True, LastHeartbeatTime: hb, LastTransitionTime: t0},
				{Type: "MemoryPressure", Status: "False", LastHeartbeatTime: hb, LastTransitionTime: t0},
			}},
		}
		for _, m := range mods {
			m(n)
		}
		return n
	}
	tests := []struct {
		name string
		a, b *pb.Node
		want bool
	}{
		{"equal", node(t0), node(t0), true},
		{"heartbeat times only", node(t0), node(t1), true},
		{"one without heartbeat times", node(nil), node(t1), true},
		{"a condition's status", node(t0), node(t1, func(n *pb.Node) { n.Status.Conditions[1].Status = "True" }), false},
		{"a transition time", node(t0), node(t0, func(n *pb.Node) { n.Status.Conditions[0].LastTransitionTime = t1 }), false},
		{"a label", node(t0), node(t1, func(n *pb.Node) { n.Metadata.Labels["zone"] = "b" }), false},
		{"a condition less", node(t0), node(t1, func(n *pb.Node) { n.Status.Conditions = n.Status.Conditions[:1] }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantA, wantB := proto.Clone(tc.a), proto.Clone(tc.b)
			if got := sameButHeartbeat(tc.a, tc.b); got != tc.want {
				t.Errorf("sameButHeartbeat = %v, want %v", got, tc.want)
			}
			if !proto.Equal(tc.a, wantA) || !proto.Equal(tc.b, wantB) {
				t.Error("the nodes compared were changed")
			}
		})
	}
	// Both nodes holding the same condition: its time is put back too.
	shared := node(t1)
	other := node(t0, func(n *pb.Node) { n.Status.Conditions[0] = shared.Status.Conditions[0] })
	if !sameButHeartbeat(shared, other) || shared.Status.Conditions[0].LastHeartbeatTime != t1 {
		t.Errorf("shared condition: heartbeat time %v after the comparison, want %v", shared.Status.Conditions[0].LastHeartbeatTime, t1)
	}
}

// BenchmarkUnchangedHeartbeat is one node's heartbeat that changes nothing but its times: a lease
// renewal and no node write, the common case of 5,000 nodes' 500 heartbeats a second. With the
// agent's digest the node is not decoded.
func BenchmarkUnchangedHeartbeat(b *testing.B) {
	for _, digest := range []bool{false, true} {
		name := "decoded"
		if digest {
			name = "by_digest"
		}
		b.Run(name, func(b *testing.B) {
			i := newIdle(b, Config{NodeStatusReportFrequency: time.Hour})
			base := time.Now().Add(-time.Hour)
			st := agentState{cpu: "4", zone: "z1"}
			// The digest leaves the times out: the agent's, made once, holds for every beat.
			sum := withDigest(st.heartbeat("n1", base)).StatusDigest
			beat := func(at time.Time) *pb.NodeHeartbeat {
				hb := st.heartbeat("n1", at)
				if digest {
					hb.StatusDigest = sum
				}
				return hb
			}
			i.handle(beat(base), base)
			node0, _ := i.revs("n1")
			b.ReportAllocs()
			b.ResetTimer()
			for k := range b.N {
				at := base.Add(time.Duration(k+1) * time.Millisecond)
				i.handle(beat(at), at)
			}
			b.StopTimer()
			if node1, _ := i.revs("n1"); node1 != node0 {
				b.Fatalf("node written %d times", node1-node0)
			}
		})
	}
}
