package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/bus"
)

// The server pins a partition of constrained pods to whichever replica pulls first, so a replica that
// started early serves all of them, and one that restarted serves none. Replicas therefore announce
// themselves on bus.SubjSchedulerMembers, count the replicas heard lately, and each yields the
// partitions it serves beyond its fair share: it stops pulling one, unpins it so that the server pins
// another replica's waiting pull at once, and pulls it again, as a standby, after a cooldown. Yielding
// never leaves a partition without a puller while another replica lives, and with none it resumes
// after the cooldown, which stays below the consumers' ack wait.
const (
	memberBeat    = time.Second
	memberTTL     = 3 * memberBeat
	balanceEvery  = 2 * time.Second
	activeWindow  = 3 * time.Second // a partition counts as served after a message this recently
	yieldCooldown = 5 * time.Second
)

// members tracks the replicas heard within memberTTL, this one included.
type members struct {
	mu   sync.Mutex
	self string
	seen map[string]time.Time
}

func newMembers(self string) *members { return &members{self: self, seen: map[string]time.Time{}} }

func (m *members) heard(id string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen[id] = at
}

// live counts the replicas heard within memberTTL before now, this one always included.
func (m *members) live(now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 1
	for id, at := range m.seen {
		switch {
		case now.Sub(at) > memberTTL:
			delete(m.seen, id)
		case id != m.self:
			n++
		}
	}
	return n
}

// announce publishes this replica's id every memberBeat and records the others' until ctx ends.
func (s *Service) announce(ctx context.Context, m *members) error {
	sub, err := s.conn.NC.Subscribe(bus.SubjSchedulerMembers, func(msg *nats.Msg) {
		m.heard(string(msg.Data), time.Now())
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	t := time.NewTicker(memberBeat)
	defer t.Stop()
	for {
		_ = s.conn.NC.Publish(bus.SubjSchedulerMembers, []byte(s.cfg.ID)) // a lost beat only delays a yield
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// partition is one pinned consumer of constrained pods as this replica serves it.
type partition struct {
	spec    bus.ConsumerSpec
	handled atomic.Int64 // unix nanoseconds of the last message handled here
	yield   chan struct{}
}

// toYield picks the partitions this replica should give up: those it served within activeWindow
// beyond ceil(partitions / replicas), the highest-numbered ones (every replica gives up from the same
// end, so they converge rather than trade the same partition back and forth).
func toYield(parts []*partition, replicas int, now time.Time) []*partition {
	share := (len(parts) + replicas - 1) / max(replicas, 1)
	var served []*partition
	for _, p := range parts {
		if now.Sub(time.Unix(0, p.handled.Load())) <= activeWindow {
			served = append(served, p)
		}
	}
	if len(served) <= share {
		return nil
	}
	return served[share:] // parts, hence served, are in partition order
}

// balance yields surplus partitions every balanceEvery until ctx ends.
func (s *Service) balance(ctx context.Context, parts []*partition, m *members) {
	every(ctx, balanceEvery, func() {
		now := time.Now()
		for _, p := range toYield(parts, m.live(now), now) {
			select {
			case p.yield <- struct{}{}:
			default: // already yielding
			}
		}
	})
}

// servePartition consumes one partition until ctx ends, stepping aside for yieldCooldown when asked.
func (s *Service) servePartition(ctx context.Context, p *partition) error {
	h := func(ctx context.Context, m *bus.Msg) error {
		p.handled.Store(time.Now().UnixNano())
		return s.handlePending(ctx, m)
	}
	for {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- bus.Consume(cctx, s.conn.JS, p.spec, h) }()
		select {
		case err := <-done:
			cancel()
			return err
		case <-p.yield:
		}
		cancel()
		if err := <-done; err != nil { // drained: what this replica held is handled and acked
			return err
		}
		p.handled.Store(0)
		metrics.Count("scheduler.partition_yields", 1)
		s.log.Info("yielding a pinned partition to another replica", "consumer", p.spec.Durable)
		if st, err := s.conn.JS.Stream(ctx, p.spec.Stream); err == nil {
			_ = st.UnpinConsumer(ctx, p.spec.Durable, p.spec.PinnedGroup) // no pin to lift is fine
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(yieldCooldown):
		}
	}
}
