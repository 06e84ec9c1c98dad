package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/internal/usage"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// measured is the fake runtime made to measure: every running container uses half a core and 80Mi,
// the machine one core, and the memory left is what the test sets.
type measured struct {
	*fake.Runtime
	start time.Time

	mu    sync.Mutex
	avail int64
}

func (m *measured) setAvailable(v int64) {
	m.mu.Lock()
	m.avail = v
	m.mu.Unlock()
}

func (m *measured) Stats(ctx context.Context) (agent.NodeStats, error) {
	now := time.Now()
	el := uint64(now.Sub(m.start))
	m.mu.Lock()
	avail := m.avail
	m.mu.Unlock()
	st := agent.NodeStats{Time: now, CPUNanos: el, MemoryBytes: 8<<30 - uint64(avail),
		Signals: agent.Signals{MemoryAvailable: avail, MemoryCapacity: 8 << 30}}
	sbs, err := m.ListSandboxes(ctx)
	if err != nil {
		return st, err
	}
	for _, sb := range sbs {
		for _, c := range sb.Containers {
			if c.State == agent.StateRunning {
				st.Containers = append(st.Containers, agent.ContainerStats{ID: c.ID, PodUID: sb.PodUID, Name: c.Name,
					CPUNanos: el / 2, MemoryWorkingSet: 80 << 20, StartedAt: m.start})
			}
		}
	}
	return st, nil
}

// The agent of a measuring runtime publishes its pods' usage, turns a memory threshold into
// MemoryPressure, and evicts BestEffort before Burstable, each with reason Evicted.
func TestUsageAndEviction(t *testing.T) {
	cfg := testConfig()
	cfg.UsageInterval = 100 * time.Millisecond
	cfg.EvictionHard = "memory.available<100Mi"
	e := newEnv(t, cfg, fake.Config{})
	eventually(t, func() bool {
		_, err := bus.Get(context.Background(), e.nodes, bus.NodeKey(node), &pb.Node{})
		return err == nil
	}, "the node registered")
	e.stopAgent() // replaced by one on the measuring runtime
	rt := &measured{Runtime: e.rt, start: time.Now().Add(-time.Second), avail: 4 << 30}
	a, err := agent.New(cfg, e.conn, rt)
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, a.Run)

	reports := e.usageReports(bus.SubjUsageNode(node))

	be := newPod("besteffort")
	be.Spec.Containers[0].Resources.Requests = map[string]string{}
	be.Status.QosClass = agent.QOSBestEffort
	burst := newPod("burstable")
	for _, p := range []*pb.Pod{burst, be} {
		e.create(p)
		e.until(p, "Running and Ready", isRunningReady)
	}

	deadline := time.After(wait)
	for seen := false; !seen; {
		select {
		case r := <-reports:
			n := r.Nodes[0]
			if n.Name != node || len(n.Pods) != 2 {
				continue
			}
			seen = true
			for _, p := range n.Pods {
				if len(p.Containers) != 1 || p.Containers[0].Name != "app" || p.Containers[0].MemoryBytes != 80<<20 ||
					p.Containers[0].CPUNanoCores < 100_000_000 || p.Containers[0].CPUNanoCores > 900_000_000 {
					t.Errorf("pod %s usage %+v, want about half a core and 80Mi", p.Name, p.Containers)
				}
			}
			if n.CPUNanoCores == 0 || n.MemoryBytes != 4<<30 {
				t.Errorf("node usage cpu %d mem %d", n.CPUNanoCores, n.MemoryBytes)
			}
		case <-deadline:
			t.Fatal("no usage report with both pods")
		}
	}

	rt.setAvailable(50 << 20)
	evicted := func(p *pb.Pod) bool {
		return p.GetStatus().GetPhase() == "Failed" && p.GetStatus().GetReason() == agent.ReasonEvicted
	}
	gotBE := e.until(be, "evicted", evicted)
	gotBurst := e.until(burst, "evicted", evicted)
	if !strings.HasPrefix(gotBE.GetStatus().GetMessage(), "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.") {
		t.Errorf("eviction message %q", gotBE.GetStatus().GetMessage())
	}
	finished := func(p *pb.Pod) time.Time {
		return p.GetStatus().GetContainerStatuses()[0].GetState().GetTerminated().GetFinishedAt().AsTime()
	}
	if !finished(gotBE).Before(finished(gotBurst)) {
		t.Errorf("burstable stopped at %v, besteffort at %v: want besteffort first", finished(gotBurst), finished(gotBE))
	}
	pressure := func(want string) func() bool {
		return func() bool {
			var n pb.Node
			if _, err := bus.Get(context.Background(), e.nodes, bus.NodeKey(node), &n); err != nil {
				return false
			}
			c := podutil.NodeCondition(&n, agent.CondMemoryPressure)
			return c != nil && c.GetStatus() == want
		}
	}
	eventually(t, pressure(podutil.True), "MemoryPressure True")
	rt.setAvailable(4 << 30)
	eventually(t, pressure(podutil.False), "MemoryPressure False again")
}

func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// usageReports are the usage reports published on subject from now on, those the test is too slow
// to take dropped.
func (e *env) usageReports(subject string) <-chan *usage.Report {
	e.t.Helper()
	reports := make(chan *usage.Report, 64)
	sub, err := e.conn.NC.Subscribe(subject, func(m *nats.Msg) {
		if r, err := usage.Decode(m.Data); err == nil {
			select {
			case reports <- r:
			default:
			}
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return reports
}
