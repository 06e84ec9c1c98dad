package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Nothing in an idle agent's heartbeat changes but its time: once registered, its node record stays at
// one revision while its lease is renewed.
func TestIdleAgentRenewsLeaseOnly(t *testing.T) {
	e := newEnv(t, testConfig(), fake.Config{})
	ctx := context.Background()
	leases, err := bus.OpenBucket(ctx, e.conn.JS, bus.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	renewed := func() time.Time {
		var l pb.NodeLease
		if _, err := bus.Get(ctx, leases, bus.LeaseKey(node), &l); err != nil {
			return time.Time{}
		}
		return l.GetRenewTime().AsTime()
	}
	nodeRev := func() uint64 {
		en, err := e.nodes.Get(ctx, bus.NodeKey(node))
		if err != nil {
			return 0
		}
		return en.Revision()
	}
	// The first heartbeats may still bring news (host details); wait for a node revision that outlasts
	// several renewals.
	deadline := time.Now().Add(wait)
	for {
		rev, from := nodeRev(), renewed()
		for !renewed().After(from.Add(300*time.Millisecond)) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if rev != 0 && nodeRev() == rev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node record still rewritten by heartbeats (revision %d -> %d)", rev, nodeRev())
		}
	}
}
