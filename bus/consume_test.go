package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestConsumeAcksParksAndRetries(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := bus.NewPublisher(c.JS, "test/1")

	malformedBefore := metrics.Counter("malformed.t") // counters are process-wide; -count=N reruns the test
	var handled, attempts, keptWrong atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: "t", Filters: []string{bus.SubjPodDeleted}, Workers: 3,
			Key: func(m *bus.Msg) string {
				// What the key function decoded reaches the handler.
				var d pb.PodDeleted
				if proto.Unmarshal(m.Data, &d) == nil {
					m.Keep(&d)
				}
				return m.Meta.PodUID
			}}, func(ctx context.Context, m *bus.Msg) error {
			var d pb.PodDeleted
			if err := m.Decode(&d); err != nil {
				return err
			}
			if k, ok := m.Kept().(*pb.PodDeleted); !ok || k.GetUid() != d.GetUid() {
				keptWrong.Add(1)
			}
			if d.GetUid() == "flaky" && attempts.Add(1) < 3 {
				return bus.RetryAfter(10*time.Millisecond, errors.New("not yet"))
			}
			if d.GetUid() == "panic" {
				panic("boom")
			}
			handled.Add(1)
			return nil
		})
	}()

	for _, uid := range []string{"a", "flaky", "b", "panic"} {
		if err := pub.Publish(ctx, bus.SubjPodDeleted, &pb.PodDeleted{Uid: uid}, bus.Meta{PodUID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	// A payload that is not protobuf at all.
	if _, err := c.JS.Publish(ctx, bus.SubjPodDeleted, []byte{0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool { return handled.Load() == 3 }, "handled %d of 3", handled.Load())
	if attempts.Load() < 3 {
		t.Errorf("flaky message handled after %d attempts, want 3", attempts.Load())
	}
	if keptWrong.Load() != 0 {
		t.Errorf("%d deliveries did not carry what the key function kept", keptWrong.Load())
	}

	// The garbage and the panicking message are parked on dead.<subject> with a reason.
	dead, err := c.JS.Stream(ctx, bus.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 5*time.Second, func() bool {
		info, err := dead.Info(ctx)
		return err == nil && info.State.Msgs == 2
	}, "two parked messages")
	m, err := dead.GetLastMsgForSubject(ctx, "dead."+bus.SubjPodDeleted)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(bus.HdrDeadReason) == "" || m.Header.Get(bus.HdrDeadSubject) != bus.SubjPodDeleted {
		t.Errorf("parked message headers: %v", m.Header)
	}
	if got := metrics.Counter("malformed.t") - malformedBefore; got != 2 {
		t.Errorf("malformed counter = %d, want 2", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Consume returned %v on shutdown", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Consume did not return after cancel")
	}
	// Nothing is left unacknowledged.
	cons, err := c.JS.Consumer(context.Background(), bus.StreamPods, "t")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Errorf("consumer left %d ack-pending, %d pending", info.NumAckPending, info.NumPending)
	}
}

func TestKVCompareAndSet(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := context.Background()
	b, err := bus.OpenBuckets(ctx, c.JS)
	if err != nil {
		t.Fatal(err)
	}
	key := bus.PodKey("default", "web.v1")
	rev, err := bus.Create(ctx, b.Pods, key, &pb.Pod{Metadata: &pb.ObjectMeta{Name: "web.v1", Uid: "u1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Create(ctx, b.Pods, key, &pb.Pod{}); !errors.Is(err, bus.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	rev2, err := bus.Update(ctx, b.Pods, key, &pb.Pod{Metadata: &pb.ObjectMeta{Name: "web.v1", Uid: "u1", Generation: 2}}, rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Update(ctx, b.Pods, key, &pb.Pod{}, rev); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	if err := bus.Delete(ctx, b.Pods, key, rev); !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("stale delete: %v, want ErrConflict", err)
	}
	var got pb.Pod
	if r, err := bus.Get(ctx, b.Pods, key, &got); err != nil || r != rev2 || got.GetMetadata().GetGeneration() != 2 {
		t.Fatalf("get = %d %v %v", r, err, &got)
	}
	// Mutate retries through a concurrent writer.
	calls := 0
	_, _, err = bus.Mutate(ctx, b.Pods, key, func() *pb.Pod { return &pb.Pod{} }, 5, func(p *pb.Pod) (bool, error) {
		calls++
		if calls == 1 { // someone else writes in between
			if _, err := bus.Update(ctx, b.Pods, key, &pb.Pod{Metadata: &pb.ObjectMeta{Name: "web.v1", Generation: 3}}, rev2); err != nil {
				t.Fatal(err)
			}
		}
		p.Metadata.Generation++
		return true, nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("mutate: %v after %d calls", err, calls)
	}
	if _, err := bus.Get(ctx, b.Pods, key, &got); err != nil || got.GetMetadata().GetGeneration() != 4 {
		t.Fatalf("after mutate: %v %v", err, &got)
	}
	if err := b.Pods.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Get(ctx, b.Pods, key, &got); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	_ = jetstream.ErrKeyNotFound
}

func TestProvisionIsIdempotentAndConcurrent(t *testing.T) {
	_, url := bustest.Server(t)
	ctx := context.Background()
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			c, err := bus.Connect(ctx, url, "p")
			if err != nil {
				errs <- err
				return
			}
			defer c.NC.Close()
			errs <- bus.Provision(ctx, c.JS, bus.Options{})
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("provision: %v", err)
		}
	}
}

// A consumer that goes away under a running Consume (as when its leader's NATS node leaves) is re-created
// and the service goes on handling messages instead of sitting idle.
func TestConsumeResumesAfterConsumerLoss(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := bus.NewPublisher(c.JS, "test/1")
	var handled atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: "resume", Filters: []string{bus.SubjPodDeleted}},
			func(ctx context.Context, m *bus.Msg) error { handled.Add(1); return nil })
	}()
	if err := pub.Publish(ctx, bus.SubjPodDeleted, &pb.PodDeleted{Uid: "a"}, bus.Meta{}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool { return handled.Load() == 1 }, "first message handled")
	if err := c.JS.DeleteConsumer(ctx, bus.StreamPods, "resume"); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 20*time.Second, func() bool { return metrics.Counter("pull_restarts.resume") > 0 }, "pull resumed")
	if err := pub.Publish(ctx, bus.SubjPodDeleted, &pb.PodDeleted{Uid: "b"}, bus.Meta{}); err != nil {
		t.Fatal(err)
	}
	// The re-created consumer starts from the beginning of the stream: "a" again, then "b" (at least once).
	bustest.Eventually(t, 20*time.Second, func() bool { return handled.Load() >= 3 }, "handled %d after resume", handled.Load())
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Consume did not return")
	}
}

// A pinned consumer delivers to one puller at a time; when that one stops, another takes over.
func TestPinnedConsumerServesOnePullerAndFailsOver(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := context.Background()
	pub := bus.NewPublisher(c.JS, "test/1")
	spec := bus.ConsumerSpec{Stream: bus.StreamPods, Durable: "pinned", Filters: []string{bus.SubjPodDeleted},
		PinnedGroup: "g", PinnedTTL: 2 * time.Second, Workers: 2}
	var got [2]atomic.Int64
	var cancels [2]context.CancelFunc
	var dones [2]chan error
	for i := range 2 {
		cctx, cancel := context.WithCancel(ctx)
		cancels[i], dones[i] = cancel, make(chan error, 1)
		defer cancel()
		go func() {
			dones[i] <- bus.Consume(cctx, c.JS, spec, func(context.Context, *bus.Msg) error { got[i].Add(1); return nil })
		}()
	}
	publish := func(n int) {
		t.Helper()
		for i := range n {
			if err := pub.Publish(ctx, bus.SubjPodDeleted, &pb.PodDeleted{Uid: "u" + string(rune('a'+i))}, bus.Meta{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(20)
	bustest.Eventually(t, 10*time.Second, func() bool { return got[0].Load()+got[1].Load() >= 20 }, "first batch handled")
	pinned := 0
	if got[1].Load() > 0 {
		pinned = 1
	}
	if other := got[1-pinned].Load(); other != 0 || got[pinned].Load() != 20 {
		t.Fatalf("both pullers got messages: %d and %d, want all 20 on one", got[0].Load(), got[1].Load())
	}

	cancels[pinned]()
	if err := <-dones[pinned]; err != nil {
		t.Fatal(err)
	}
	publish(20)
	bustest.Eventually(t, 15*time.Second, func() bool { return got[1-pinned].Load() >= 20 }, "the other puller took over: %d", got[1-pinned].Load())
	if got[pinned].Load() != 20 {
		t.Fatalf("the stopped puller handled %d, want 20", got[pinned].Load())
	}
}

// Messages of the group key reach the group handler together and in order, each settled by its own
// error; the others go to the ordinary handler. A group handler that panics gives way to the ordinary
// handler, message by message.
func TestWorkHandsGroupKeyToGroupHandler(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := bus.NewPublisher(c.JS, "test/1")
	const n = 120
	for i := range n {
		uid := fmt.Sprintf("g%03d", i)
		if i%10 == 9 {
			uid = fmt.Sprintf("o%03d", i) // not of the group
		}
		if _, err := pub.PublishAsync(bus.SubjPodDeleted, &pb.PodDeleted{Uid: uid}, bus.Meta{PodUID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	for _, uid := range []string{"gretry", "gpanic"} {
		if err := pub.Publish(ctx, bus.SubjPodDeleted, &pb.PodDeleted{Uid: uid}, bus.Meta{PodUID: uid}); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var grouped, single []string
	largest, retried := 0, 0
	handled := map[string]int{}
	go func() {
		_ = bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: "grp", Filters: []string{bus.SubjPodDeleted}, Workers: 2,
			Key: func(m *bus.Msg) string {
				if strings.HasPrefix(m.Meta.PodUID, "g") {
					return "group"
				}
				return m.Meta.PodUID
			},
			GroupKey: "group",
			Group: func(ctx context.Context, ms []*bus.Msg) []error {
				errs := make([]error, len(ms))
				mu.Lock()
				defer mu.Unlock()
				largest = max(largest, len(ms))
				for i, m := range ms {
					switch uid := m.Meta.PodUID; {
					case uid == "gpanic":
						panic("boom")
					case uid == "gretry" && retried == 0:
						retried++
						errs[i] = bus.RetryAfter(10*time.Millisecond, errors.New("once more"))
					default:
						grouped = append(grouped, uid)
						handled[uid]++
					}
				}
				return errs
			}}, func(ctx context.Context, m *bus.Msg) error {
			mu.Lock()
			defer mu.Unlock()
			single = append(single, m.Meta.PodUID)
			handled[m.Meta.PodUID]++
			return nil
		})
	}()
	bustest.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == n+2
	}, "every message handled")
	mu.Lock()
	defer mu.Unlock()
	var inOrder []string
	for _, uid := range grouped {
		if uid != "gretry" {
			inOrder = append(inOrder, uid)
		}
	}
	if !slices.IsSorted(inOrder) || largest < 2 || handled["gretry"] != 1 {
		t.Errorf("grouped %v (largest group %d, gretry handled %d); want them in order, some together, gretry once after its retry", grouped, largest, handled["gretry"])
	}
	for _, uid := range single {
		if strings.HasPrefix(uid, "g") && uid != "gpanic" && uid != "gretry" && !slices.Contains(grouped, uid) {
			t.Errorf("%s of the group reached the single handler alone", uid)
		}
	}
	if !slices.Contains(single, "gpanic") || !slices.Contains(single, "o009") {
		t.Errorf("single handler got %v; want the other keys and, after the panic, gpanic", single)
	}
}

// With KeyGroup, each worker hands everything queued for it at once: a key's messages arrive in order,
// several together, each settled by its own error (a retried one comes back alone, later).
func TestWorkHandsQueuedMessagesToKeyGroup(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := bus.NewPublisher(c.JS, "test/1")
	const n = 200
	for i := range n {
		uid := fmt.Sprintf("k%d-%03d", i%3, i)
		if _, err := pub.PublishAsync(bus.SubjPodDeleted, &pb.PodDeleted{Uid: uid}, bus.Meta{PodUID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string][]string{} // by key, in the order handled
	largest, retried, single := 0, 0, 0
	go func() {
		_ = bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: "kgrp", Filters: []string{bus.SubjPodDeleted}, Workers: 2,
			Key: func(m *bus.Msg) string { return m.Meta.PodUID[:2] },
			KeyGroup: func(ctx context.Context, ms []*bus.Msg) []error {
				errs := make([]error, len(ms))
				mu.Lock()
				defer mu.Unlock()
				largest = max(largest, len(ms))
				for i, m := range ms {
					uid := m.Meta.PodUID
					if uid == "k1-004" && retried == 0 {
						retried++
						errs[i] = bus.RetryAfter(10*time.Millisecond, errors.New("once more"))
						continue
					}
					seen[uid[:2]] = append(seen[uid[:2]], uid)
				}
				return errs
			}}, func(ctx context.Context, m *bus.Msg) error {
			mu.Lock()
			defer mu.Unlock()
			single++
			return nil
		})
	}()
	bustest.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["k0"])+len(seen["k1"])+len(seen["k2"]) == n
	}, "every message handled")
	mu.Lock()
	defer mu.Unlock()
	for key, uids := range seen {
		ordered := slices.DeleteFunc(slices.Clone(uids), func(u string) bool { return u == "k1-004" })
		if !slices.IsSorted(ordered) {
			t.Errorf("key %s handled out of order: %v", key, uids)
		}
	}
	if largest < 2 || single != 0 || retried != 1 || !slices.Contains(seen["k1"], "k1-004") {
		t.Errorf("largest group %d, %d handled alone, k1-004 retried %d and handled %v; want groups, none alone, one retry, then handled",
			largest, single, retried, slices.Contains(seen["k1"], "k1-004"))
	}
}
