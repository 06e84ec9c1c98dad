package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/events"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestBatcherGroupsMessagesInOrder(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := context.Background()
	b := bus.NewBatcher(c.JS, "test/1")

	// Alone, a message is stored as itself, with its de-duplication id.
	if err := b.Publish(ctx, bus.SubjPodDeleted, &pb.PodDeleted{Uid: "lone"}, bus.Meta{MsgID: "del-lone", PodUID: "lone"}); err != nil {
		t.Fatal(err)
	}
	lone := bustest.LastMsg(t, c, bus.StreamPods, bus.SubjPodDeleted)
	if lone.Header.Get(bus.HdrBatch) != "" || lone.Header.Get(bus.HdrMsgID) != "del-lone" || lone.Header.Get(bus.HdrActor) != "test/1" {
		t.Fatalf("a lone message was stored with headers %v", lone.Header)
	}

	const n = 600 // more than two full batches
	futures := make([]jetstream.PubAckFuture, n)
	for i := range futures {
		uid := fmt.Sprintf("u%03d", i)
		f, err := b.PublishAsync(bus.SubjPodDeleted, &pb.PodDeleted{Uid: uid}, bus.Meta{PodUID: uid, Key: "ns/" + uid})
		if err != nil {
			t.Fatal(err)
		}
		futures[i] = f
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		t.Fatal(err)
	}

	st, err := c.JS.Stream(ctx, bus.StreamPods)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(bus.SubjPodDeleted))
	if err != nil {
		t.Fatal(err)
	}
	stored := info.State.Subjects[bus.SubjPodDeleted] - 1
	if stored >= n || stored < (n+bus.MaxBatchEntries-1)/bus.MaxBatchEntries {
		t.Fatalf("%d messages queued at once were stored as %d", n, stored)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		raw, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var batch pb.Batch
		if raw.Header.Get(bus.HdrBatch) != "" && proto.Unmarshal(raw.Data, &batch) == nil && len(batch.GetEntries()) > bus.MaxBatchEntries {
			t.Fatalf("stored batch %d holds %d entries", seq, len(batch.GetEntries()))
		}
	}

	got := bustest.Messages(t, c, bus.StreamPods, bus.SubjPodDeleted)[1:]
	if len(got) != n {
		t.Fatalf("unpacked %d messages, want %d", len(got), n)
	}
	for i, m := range got {
		uid := fmt.Sprintf("u%03d", i)
		d := bustest.Decode(t, m, &pb.PodDeleted{})
		if d.GetUid() != uid || m.Header.Get(bus.HdrPodUID) != uid || m.Header.Get(bus.HdrKey) != "ns/"+uid || m.Header.Get(bus.HdrActor) != "test/1" {
			t.Fatalf("message %d: uid %q, headers %v; want %s in order with its own headers", i, d.GetUid(), m.Header, uid)
		}
	}
}

// A batch built as the wire format says: entries keep their own headers.
func publishBatch(t *testing.T, c *bus.Conn, subject string, entries ...*pb.BatchEntry) {
	t.Helper()
	data, err := proto.Marshal(&pb.Batch{Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{bus.HdrBatch: {fmt.Sprint(len(entries))}, bus.HdrActor: {"test/1"}}}
	if _, err := c.JS.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

func deletedEntry(t *testing.T, uid string) *pb.BatchEntry {
	data, err := proto.Marshal(&pb.PodDeleted{Uid: uid})
	if err != nil {
		t.Fatal(err)
	}
	return &pb.BatchEntry{Data: data, Headers: map[string]string{bus.HdrPodUID: uid}}
}

func TestWorkHandlesEachEntryOfABatch(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	handled := map[string]int{}
	positions := map[uint64]string{}
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: "t", Filters: []string{bus.SubjPodDeleted},
			Workers: 3, Key: func(m *bus.Msg) string { return m.Meta.PodUID }},
			func(ctx context.Context, m *bus.Msg) error {
				var d pb.PodDeleted
				if err := m.Decode(&d); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if d.GetUid() != m.Meta.PodUID {
					return fmt.Errorf("entry %d carries the headers of %q", m.Index, m.Meta.PodUID)
				}
				handled[d.GetUid()]++
				if prev, ok := positions[m.Position()]; ok && prev != d.GetUid() {
					return fmt.Errorf("%s and %s share position %d", prev, d.GetUid(), m.Position())
				}
				positions[m.Position()] = d.GetUid()
				if d.GetUid() == "flaky" && handled["flaky"] == 1 {
					return bus.RetryAfter(10*time.Millisecond, errors.New("not yet"))
				}
				return nil
			})
	}()

	bad := &pb.BatchEntry{Data: []byte{0xff, 0xff, 0xff}, Headers: map[string]string{bus.HdrPodUID: "bad"}}
	publishBatch(t, c, bus.SubjPodDeleted, deletedEntry(t, "a"), deletedEntry(t, "flaky"), bad, deletedEntry(t, "b"))
	// A batch that does not decode is parked whole.
	if _, err := c.JS.PublishMsg(ctx, &nats.Msg{Subject: bus.SubjPodDeleted, Data: []byte{0xff}, Header: nats.Header{bus.HdrBatch: {"2"}}}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool { return bustest.Drained(c, bus.StreamPods, "t") }, "consumer t drained")

	mu.Lock()
	// The redelivery of the batch hands out only the entry that failed: the others were handled here.
	if want := map[string]int{"a": 1, "flaky": 2, "b": 1}; fmt.Sprint(handled) != fmt.Sprint(want) {
		t.Errorf("handled %v, want %v", handled, want)
	}
	if len(positions) != 3 {
		t.Errorf("positions %v: want three distinct ones", positions)
	}
	mu.Unlock()

	dead := bustest.Messages(t, c, bus.StreamDead, bus.SubjDeadPrefix+">")
	if len(dead) != 2 {
		t.Fatalf("%d parked messages, want the bad entry and the undecodable batch", len(dead))
	}
	if dead[0].Header.Get(bus.HdrPodUID) != "bad" || dead[0].Header.Get(bus.HdrDeadReason) == "" {
		t.Errorf("parked entry has headers %v; want its own, with a reason", dead[0].Header)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestUnbatchReadsTheWireFormat(t *testing.T) {
	batch := &pb.Batch{Entries: []*pb.BatchEntry{
		{Data: []byte("first"), Headers: map[string]string{bus.HdrPodUID: "u1", bus.HdrKey: "ns/a", bus.HdrMsgID: "m1"}},
		{}, // no payload, no headers
		{Data: []byte{0, 1, 2}, Headers: map[string]string{bus.HdrTrigger: "", bus.HdrReply: "r.1"}},
	}}
	data, err := proto.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	// Fields of another wire type (a later version's), before and after the entries, are skipped.
	data = append(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 7), data...)
	data = protowire.AppendVarint(protowire.AppendTag(data, 9, protowire.VarintType), 42)
	outer := nats.Header{bus.HdrBatch: {"3"}, bus.HdrActor: {"store/a"}}
	got, err := bus.Unbatch(bus.SubjPodScheduled, outer, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(batch.Entries) {
		t.Fatalf("%d entries, want %d", len(got), len(batch.Entries))
	}
	for i, e := range batch.Entries {
		want := nats.Header{bus.HdrActor: {"store/a"}}
		for k, v := range e.Headers {
			want[k] = []string{v}
		}
		if string(got[i].Data) != string(e.Data) || fmt.Sprint(got[i].Header) != fmt.Sprint(want) {
			t.Errorf("entry %d: data %q headers %v; want %q %v", i, got[i].Data, got[i].Header, e.Data, want)
		}
	}

	for name, bad := range map[string][]byte{
		"truncated": data[:len(data)-5],
		"garbage":   {0xff, 0xff, 0xff},
		"empty":     nil,
	} {
		if _, err := bus.Unbatch(bus.SubjPodScheduled, outer, bad); !errors.Is(err, bus.ErrMalformed) {
			t.Errorf("%s batch: err %v, want ErrMalformed", name, err)
		}
	}
	// Without the header a message stands for itself.
	if got, err := bus.Unbatch(bus.SubjPodScheduled, nats.Header{}, data); err != nil || len(got) != 1 || string(got[0].Data) != string(data) {
		t.Errorf("plain message unpacked as %d entries, err %v", len(got), err)
	}
}

// Events recorded at once about many objects are stored as batches of their namespace, each entry
// keeping its own subject; alone, an event is stored on its own subject with its message id.
func TestBatcherGroupsEventsPerNamespace(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := context.Background()
	rec := events.NewRecorder(bus.NewBatcher(c.JS, "test/1"), "default-scheduler", "test/1")
	ref := func(ns, name string) *pb.ObjectReference {
		return &pb.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, Uid: ns + "-" + name}
	}

	f, err := rec.Event(ref("a", "lone"), "Normal", "Scheduled", "alone", "", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Wait(ctx, f); err != nil {
		t.Fatal(err)
	}
	lone := bustest.LastMsg(t, c, bus.StreamEvents, bus.SubjEvent("a", "lone"))
	if lone == nil || lone.Header.Get(bus.HdrBatch) != "" || lone.Header.Get(bus.HdrMsgID) == "" {
		t.Fatalf("a lone event was stored as %v", lone)
	}

	const n = 300
	var futures []jetstream.PubAckFuture
	for i := range n {
		ns := []string{"a", "b"}[i%2]
		f, err := rec.Event(ref(ns, fmt.Sprintf("p%03d", i)), "Normal", "Scheduled", fmt.Sprint(i), "", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		t.Fatal(err)
	}
	st, err := c.JS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(bus.SubjAllEvents))
	if err != nil {
		t.Fatal(err)
	}
	if stored := info.State.Msgs - 1; stored >= n/2 {
		t.Errorf("%d events recorded at once were stored as %d messages", n, stored)
	}
	if info.State.Subjects["event.a"] == 0 || info.State.Subjects["event.b"] == 0 {
		t.Errorf("no batch on the namespaces' subjects: event.a %d, event.b %d", info.State.Subjects["event.a"], info.State.Subjects["event.b"])
	}
	for i := range n {
		ns, name := []string{"a", "b"}[i%2], fmt.Sprintf("p%03d", i)
		got := bustest.Messages(t, c, bus.StreamEvents, bus.SubjEvent(ns, name))
		if len(got) != 1 {
			t.Fatalf("%d messages read for %s/%s, want 1", len(got), ns, name)
		}
		ev := bustest.Decode(t, got[0], &pb.Event{})
		if ev.GetInvolvedObject().GetName() != name || ev.GetMessage() != fmt.Sprint(i) || got[0].Subject != bus.SubjEvent(ns, name) {
			t.Fatalf("read for %s/%s: %v on %s", ns, name, ev, got[0].Subject)
		}
	}
	if got := len(bustest.Messages(t, c, bus.StreamEvents, bus.SubjEventsFor("b"))); got != n/2 {
		t.Errorf("%d events read in namespace b, want %d", got, n/2)
	}
}

// The poison batch of issue 19: an entry whose own subject is not a valid subject (and whose headers
// NATS would refuse) cannot be parked on dead.<subject>. It is parked once, under the fallback subject
// with its subject quoted and a reason; an entry claiming a subject its batch cannot hold is parked on
// dead.<that subject>; the other entries and later messages are handled.
func TestPoisonBatchEntryParkedOnce(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	handled := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: "poison", Filters: []string{bus.SubjPodDeleted}, Workers: 2,
			Key: func(m *bus.Msg) string { return m.Meta.PodUID }},
			func(ctx context.Context, m *bus.Msg) error {
				var d pb.PodDeleted
				if err := m.Decode(&d); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				handled[d.GetUid()]++
				return nil
			})
	}()

	const badSubject = "pod deleted\r\nPUB $JS.API.STREAM.DELETE.AUDIT 0"
	poison := deletedEntry(t, "poison")
	poison.Headers[bus.HdrSubject] = badSubject
	poison.Headers["Bad: Header"] = "x"
	liar := deletedEntry(t, "liar")
	liar.Headers[bus.HdrSubject] = bus.SubjPodScheduled
	publishBatch(t, c, bus.SubjPodDeleted, deletedEntry(t, "a"), poison, liar, deletedEntry(t, "b"))
	publishBatch(t, c, bus.SubjPodDeleted, deletedEntry(t, "c"), deletedEntry(t, "d"))
	bustest.Eventually(t, 10*time.Second, func() bool { return bustest.Drained(c, bus.StreamPods, "poison") }, "consumer drained")

	mu.Lock()
	if want := map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}; fmt.Sprint(handled) != fmt.Sprint(want) {
		t.Errorf("handled %v, want %v", handled, want)
	}
	mu.Unlock()
	dead := bustest.Messages(t, c, bus.StreamDead, bus.SubjDeadPrefix+">")
	if len(dead) != 2 {
		t.Fatalf("%d parked messages, want the poison and the liar once each", len(dead))
	}
	for _, m := range dead {
		switch m.Header.Get(bus.HdrPodUID) {
		case "poison":
			if m.Subject != bus.SubjDeadFallback || m.Header.Get(bus.HdrDeadSubject) != strconv.Quote(badSubject) || m.Header.Get(bus.HdrDeadReason) == "" {
				t.Errorf("poison parked on %s with headers %v; want %s, its subject quoted and a reason", m.Subject, m.Header, bus.SubjDeadFallback)
			}
		case "liar":
			if m.Subject != bus.SubjDeadPrefix+bus.SubjPodScheduled || m.Header.Get(bus.HdrDeadReason) == "" {
				t.Errorf("liar parked on %s with headers %v", m.Subject, m.Header)
			}
		default:
			t.Errorf("unexpected parked message on %s: %v", m.Subject, m.Header)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A message whose handler fails on every delivery is parked on the last one the consumer allows,
// once, and the consumer goes on.
func TestLastDeliveryParks(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const maxDeliver = 3
	var mu sync.Mutex
	attempts := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: "bounded", Filters: []string{bus.SubjPodDeleted}, MaxDeliver: maxDeliver},
			func(ctx context.Context, m *bus.Msg) error {
				var d pb.PodDeleted
				if err := m.Decode(&d); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				attempts[d.GetUid()]++
				if d.GetUid() == "hopeless" {
					return errors.New("store unavailable")
				}
				return nil
			})
	}()
	pub := bus.NewPublisher(c.JS, "test/1")
	for _, uid := range []string{"hopeless", "next"} {
		if err := pub.Publish(ctx, bus.SubjPodDeleted, &pb.PodDeleted{Uid: uid}, bus.Meta{PodUID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	bustest.Eventually(t, 10*time.Second, func() bool { return bustest.Drained(c, bus.StreamPods, "bounded") }, "consumer drained")
	mu.Lock()
	if want := map[string]int{"hopeless": maxDeliver, "next": 1}; fmt.Sprint(attempts) != fmt.Sprint(want) {
		t.Errorf("attempts %v, want %v", attempts, want)
	}
	mu.Unlock()
	dead := bustest.Messages(t, c, bus.StreamDead, bus.SubjDeadPrefix+">")
	if len(dead) != 1 || dead[0].Header.Get(bus.HdrPodUID) != "hopeless" || !strings.Contains(dead[0].Header.Get(bus.HdrDeadReason), "gave up after 3 deliveries") {
		t.Fatalf("parked %v; want hopeless once, with the reason", dead)
	}
	cons, err := c.JS.Consumer(ctx, bus.StreamPods, "bounded")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := cons.Info(ctx); err != nil || info.Config.MaxDeliver != maxDeliver {
		t.Errorf("consumer MaxDeliver %v (%v), want %d", info.Config.MaxDeliver, err, maxDeliver)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A batch carries a de-duplication id made of its entries' ids: the same batch sent again (an
// acknowledgement lost, the group published once more) is dropped by the stream, and its entries keep
// their own ids rather than the batch's.
func TestBatchSentTwiceIsStoredOnce(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := context.Background()
	b := bus.NewBatcher(c.JS, "test/1")
	const n = 300
	futures := make([]jetstream.PubAckFuture, n)
	for i := range futures {
		uid := fmt.Sprintf("u%03d", i)
		f, err := b.PublishAsync(bus.SubjPodDeleted, &pb.PodDeleted{Uid: uid}, bus.Meta{MsgID: "deleted-" + uid, PodUID: uid})
		if err != nil {
			t.Fatal(err)
		}
		futures[i] = f
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		t.Fatal(err)
	}
	st, err := c.JS.Stream(ctx, bus.StreamPods)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var batch *jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && batch == nil; seq++ {
		raw, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if raw.Header.Get(bus.HdrBatch) != "" {
			batch = raw
		}
	}
	if batch == nil {
		t.Fatal("no batch stored")
	}
	entries, err := bus.Unbatch(batch.Subject, batch.Header, batch.Data)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.Header.Get(bus.HdrMsgID)
		if !strings.HasPrefix(ids[i], "deleted-") {
			t.Fatalf("entry %d has msg id %q, want its own", i, ids[i])
		}
	}
	if got, want := batch.Header.Get(bus.HdrMsgID), bus.BatchMsgID(batch.Subject, ids); got == "" || got != want {
		t.Fatalf("batch msg id = %q, want %q", got, want)
	}

	ack, err := c.JS.PublishMsg(ctx, &nats.Msg{Subject: batch.Subject, Header: batch.Header, Data: batch.Data})
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Errorf("the batch sent again was stored as sequence %d", ack.Sequence)
	}
}

func TestBatchMsgID(t *testing.T) {
	tests := []struct {
		name       string
		a, b       []string
		same, none bool
	}{
		{name: "same entries", a: []string{"x", "y"}, b: []string{"x", "y"}, same: true},
		{name: "order does not matter", a: []string{"x", "y"}, b: []string{"y", "x"}, same: true},
		{name: "no split ambiguity", a: []string{"xy", "z"}, b: []string{"x", "yz"}},
		{name: "an entry without id", a: []string{"x", ""}, b: []string{"x", ""}, none: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := bus.BatchMsgID("pod.scheduled", tt.a), bus.BatchMsgID("pod.scheduled", tt.b)
			if tt.none {
				if a != "" {
					t.Fatalf("id %q for a batch with an entry without id", a)
				}
				return
			}
			if (a == b) != tt.same {
				t.Errorf("ids %q and %q: same = %v, want %v", a, b, a == b, tt.same)
			}
		})
	}
	if bus.BatchMsgID("pod.scheduled", []string{"x"}) == bus.BatchMsgID("pod.pending.any", []string{"x"}) {
		t.Error("the subject is not part of the id")
	}
}

// A group waits for company only when its batcher stored another a moment ago: a message of an idle
// batcher goes at once, and one that follows a store waits for the messages behind it.
func TestBatcherLingersOnlyWhenBusy(t *testing.T) {
	tests := []struct {
		name   string
		linger time.Duration
		// stores is how many stored messages hold the two that follow the first one.
		stores int
	}{
		{"lingering", 2 * time.Second, 1},
		{"no linger", 0, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, c := bustest.Start(t)
			b := bus.NewBatcher(c.JS, "test/1", bus.WithLinger(tc.linger))
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			// Idle: the first message does not wait, even for a linger longer than ctx allows.
			if err := b.Publish(ctx, bus.SubjPodDeleted, &pb.PodDeleted{Uid: "first"}, bus.Meta{PodUID: "first"}); err != nil {
				t.Fatalf("the first message of an idle batcher: %v", err)
			}
			second, err := b.PublishAsync(bus.SubjPodDeleted, &pb.PodDeleted{Uid: "second"}, bus.Meta{PodUID: "second"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.linger == 0 {
				// Without a linger the second goes on its own: wait for it, so the third cannot join it.
				if err := bus.Wait(ctx, second); err != nil {
					t.Fatal(err)
				}
			} else {
				time.Sleep(20 * time.Millisecond) // well within the linger
			}
			third, err := b.PublishAsync(bus.SubjPodDeleted, &pb.PodDeleted{Uid: "third"}, bus.Meta{PodUID: "third"})
			if err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(context.Background(), tc.linger+10*time.Second)
			defer wcancel()
			pending := []jetstream.PubAckFuture{third}
			if tc.linger > 0 {
				pending = append(pending, second)
			}
			if err := bus.Wait(wctx, pending...); err != nil {
				t.Fatal(err)
			}

			st, err := c.JS.Stream(context.Background(), bus.StreamPods)
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(bus.SubjPodDeleted))
			if err != nil {
				t.Fatal(err)
			}
			if got := int(info.State.Subjects[bus.SubjPodDeleted]) - 1; got != tc.stores {
				t.Errorf("the second and third messages were stored as %d messages, want %d", got, tc.stores)
			}
			var uids []string
			for _, m := range bustest.Messages(t, c, bus.StreamPods, bus.SubjPodDeleted) {
				uids = append(uids, bustest.Decode(t, m, &pb.PodDeleted{}).GetUid())
			}
			if want := "first second third"; strings.Join(uids, " ") != want {
				t.Errorf("stored %v, want %s in order", uids, want)
			}
		})
	}
}
