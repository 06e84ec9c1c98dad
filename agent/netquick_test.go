package agent_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// countingChecks is the fake runtime with a connectivity check, counting both kinds of check and
// remembering which came first.
type countingChecks struct {
	*fake.Runtime
	quick, full atomic.Int32
	first       atomic.Value // "quick" or "full"
}

func (c *countingChecks) CheckSandbox(ctx context.Context, sb agent.Sandbox) error {
	c.full.Add(1)
	c.first.CompareAndSwap(nil, "full")
	return c.Runtime.CheckSandbox(ctx, sb)
}

func (c *countingChecks) CheckSandboxConnectivity(ctx context.Context, sb agent.Sandbox) error {
	c.quick.Add(1)
	c.first.CompareAndSwap(nil, "quick")
	return c.Runtime.CheckSandbox(ctx, sb)
}

func TestFirstNetworkCheckIsConnectivityOnly(t *testing.T) {
	tests := []struct {
		name      string
		interval  time.Duration
		wantQuick bool
	}{
		{"periodic checks on: quick first, full later", 300 * time.Millisecond, true},
		{"periodic checks off: the only check is full", -1, false},
		// The simulated runtime's networks break only when a test says so: off unless asked.
		{"default on a static network: off", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.NetworkCheckInterval = tt.interval
			e := newEnv(t, cfg, fake.Config{})
			// The env's agent is replaced by one on the counting runtime, once it has registered the node.
			for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
				if _, err := bus.Get(context.Background(), e.nodes, bus.NodeKey(node), &pb.Node{}); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the node never registered")
				}
			}
			e.stopAgent()
			rt := &countingChecks{Runtime: e.rt}
			a, err := agent.New(cfg, e.conn, rt)
			if err != nil {
				t.Fatal(err)
			}
			e.run(t, a.Run)
			p := newPod("netcheck")
			e.create(p)
			e.until(p, "Running and Ready", isRunningReady)
			// The periodic full check may come before the test sees Ready, so with checks on only
			// the first check's kind and the single quick one are asserted.
			q, f, first := rt.quick.Load(), rt.full.Load(), rt.first.Load()
			if tt.wantQuick && (q != 1 || first != "quick") || !tt.wantQuick && (q != 0 || f != 1) {
				t.Fatalf("checks by Ready: %d quick, %d full, the first %v", q, f, first)
			}
			if !tt.wantQuick {
				return
			}
			for deadline := time.Now().Add(wait); rt.full.Load() == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no full check on the periodic schedule")
				}
			}
		})
	}
}
