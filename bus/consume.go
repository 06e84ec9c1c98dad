package bus

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// ErrMalformed marks a message that can never be handled (it does not decode, or says something
// impossible). Consume parks it on dead.<subject>, counts it and terminates it: no crash, no redelivery loop.
var ErrMalformed = errors.New("malformed message")

// ErrPermanent marks a message whose handling failed for good (parked like a malformed one).
var ErrPermanent = errors.New("permanent failure")

// RetryError asks Consume to redeliver the message after Delay (a negative acknowledgement).
type RetryError struct {
	Delay time.Duration
	Err   error
}

func (e *RetryError) Error() string { return fmt.Sprintf("retry in %s: %v", e.Delay, e.Err) }
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter wraps err so that the message is redelivered after d.
func RetryAfter(d time.Duration, err error) error { return &RetryError{Delay: d, Err: err} }

// Msg is one delivered message.
type Msg struct {
	Subject   string
	Data      []byte
	Header    nats.Header
	Meta      Meta
	Delivered uint64 // 1 on first delivery
	StreamSeq uint64
	Time      time.Time // when the stream stored it
	// Index of the message in its batch (see Batcher); 0 for a message stored alone.
	Index int
	ack   acker
	bad   error // set when the stored message cannot be unpacked: the handler is not called
	kept  proto.Message
}

// Position identifies the message in its stream and orders it there, batch entries included: the
// stream sequence with the entry's index in its low bits.
func (m *Msg) Position() uint64 { return Position(m.StreamSeq, m.Index) }

// Position is the position of entry index of the stored message at stream sequence seq.
func Position(seq uint64, index int) uint64 { return seq<<PositionBits | uint64(index) }

// acker settles a delivered message: the JetStream message itself, or one entry's share of a batch.
type acker interface {
	Ack() error
	Term() error
	NakWithDelay(delay time.Duration) error
	InProgress() error
}

// Keep holds a payload the consumer's Key function decoded, so that the handler need not decode it
// again (the handler runs after Key, on the same Msg).
func (m *Msg) Keep(v proto.Message) { m.kept = v }

// Kept returns what Keep held, or nil.
func (m *Msg) Kept() proto.Message { return m.kept }

// Decode unmarshals the payload; a failure wraps ErrMalformed.
func (m *Msg) Decode(into proto.Message) error {
	if err := proto.Unmarshal(m.Data, into); err != nil {
		return fmt.Errorf("decode %T from %s: %w", into, m.Subject, errors.Join(ErrMalformed, err))
	}
	return nil
}

// InProgress tells JetStream the handler is still working (extends the ack wait).
func (m *Msg) InProgress() {
	if m.ack != nil {
		_ = m.ack.InProgress()
	}
}

// Handler handles one message. nil: ack. ErrMalformed/ErrPermanent: park and terminate.
// *RetryError: nak with its delay. Anything else: nak with back-off by delivery count.
type Handler func(ctx context.Context, m *Msg) error

// GroupHandler handles several messages at once, in the order they came, and returns one error per
// message, each meaning what it means for a Handler.
type GroupHandler func(ctx context.Context, ms []*Msg) []error

// ConsumerSpec describes a durable pull consumer and how it is worked.
type ConsumerSpec struct {
	Stream  string
	Durable string
	Filters []string
	// AckWait before an unacknowledged message is redelivered (default 10s; long handlers call InProgress).
	AckWait time.Duration
	// MaxAckPending bounds the messages in flight across all replicas (default 8192).
	MaxAckPending int
	// Workers handling messages concurrently in this process (default 1).
	Workers int
	// Key, when set, sends messages with the same key to the same worker, in order.
	Key func(m *Msg) string
	// Group, when set with Key, sends the messages whose key is GroupKey to a worker of their own, which
	// hands Group all of them that are queued at once (at most MaxGroup), in order. A handler that must
	// take them one at a time, each waiting on the bus, can then wait once for several.
	GroupKey string
	Group    GroupHandler
	// KeyGroup, when set with Key, makes every worker hand it all the messages queued for it at once (at
	// most MaxGroup), in order, instead of handing them to the Handler one by one: a handler that commits
	// the messages of one key one after another, each waiting on the bus, can then commit them together.
	// The group holds the messages of every key the worker serves.
	KeyGroup GroupHandler
	// Batch is how many messages one pull asks for (default 256).
	Batch int
	// PinnedGroup, when set, makes the consumer pinned (PriorityPolicyPinned) with this priority group:
	// the server delivers to one client at a time, and moves to another one PinnedTTL after the pinned
	// client stopped pulling (it died or left).
	PinnedGroup string
	PinnedTTL   time.Duration // default 5s; keep it below AckWait
	// DeliverNew starts a newly created consumer at the end of the stream instead of the beginning.
	DeliverNew bool
	// MaxDeliver bounds the deliveries of a message (default DefaultMaxDeliver); the last one parks a
	// message its handler still fails (see Work).
	MaxDeliver int
	Logger     *slog.Logger
}

// Consume creates (or reuses) the durable consumer and handles messages until ctx is cancelled.
// Then it stops pulling, lets the workers finish what they hold, and returns nil.
func Consume(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, h Handler) error {
	bound := binding(spec.Durable)
	cons, err := EnsureConsumer(ctx, js, spec)
	defer bound(err == nil)()
	if err != nil {
		if ctx.Err() != nil {
			return nil // shut down while setting up: not a failure
		}
		return err
	}
	return Work(ctx, js, cons, spec, h)
}

// DefaultMaxDeliver is how many times a message is delivered at most. Failures back off to 5s between
// deliveries, so a message is given up only after more than an hour of failing: longer than any
// outage of NATS or of a store the pipeline rides out by redelivery, short enough that nothing is
// retried forever or fills MaxAckPending.
const DefaultMaxDeliver = 1000

// EnsureConsumer creates or updates the durable consumer of spec.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:       spec.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       orDuration(spec.AckWait, 10*time.Second),
		MaxAckPending: orInt(spec.MaxAckPending, 8192),
		MaxDeliver:    spec.maxDeliver(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	if spec.DeliverNew {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	if spec.PinnedGroup != "" {
		cfg.PriorityPolicy = jetstream.PriorityPolicyPinned
		cfg.PriorityGroups = []string{spec.PinnedGroup}
		cfg.PinnedTTL = spec.pinnedTTL()
	}
	if len(spec.Filters) == 1 {
		cfg.FilterSubject = spec.Filters[0]
	} else {
		cfg.FilterSubjects = spec.Filters
	}
	var cons jetstream.Consumer
	err := retry(ctx, "consumer "+spec.Durable+" on "+spec.Stream, func(ctx context.Context) error {
		var err error
		cons, err = js.CreateOrUpdateConsumer(ctx, spec.Stream, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", spec.Durable, spec.Stream, err)
	}
	return cons, nil
}

// workerQueue is how many pulled messages may wait for each worker.
const workerQueue = 16

// MaxGroup bounds the messages handed to a GroupHandler at once; as many may wait for the group worker.
const MaxGroup = 64

// Work handles messages of an existing consumer until ctx is cancelled.
func Work(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, spec ConsumerSpec, h Handler) error {
	log := spec.Logger
	if log == nil {
		log = slog.Default()
	}
	workers := orInt(spec.Workers, 1)
	batch := orInt(spec.Batch, 256)
	it, err := pull(cons, spec, batch)
	if err != nil {
		return fmt.Errorf("pull %s: %w", spec.Durable, err)
	}
	w := &worker{js: js, spec: spec, h: h, log: log, settled: map[uint64][]bool{}}
	defer metrics.RegisterConsumer(spec.Durable, consumerState(cons))()

	queues := make([]chan *Msg, workers)
	var wg sync.WaitGroup
	// Handlers get a context that outlives ctx by a grace period, so in-flight work can finish
	// (and ack) during shutdown instead of being cut in the middle of a compare-and-set.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	for i := range queues {
		// Short queues: a message waiting behind a slow handler ages toward its ack wait, so long
		// queues (workers × batch) would turn a slow stretch into a storm of redeliveries. With them
		// full, the pull below stops taking messages.
		// A worker that takes its whole queue at once (KeyGroup) can hold a group's worth.
		queues[i] = make(chan *Msg, min(batch, workerQueue))
		if spec.KeyGroup != nil && spec.Key != nil {
			queues[i] = make(chan *Msg, min(batch, MaxGroup))
		}
		wg.Add(1)
		go func(q <-chan *Msg) {
			defer wg.Done()
			for m := range q {
				if spec.KeyGroup == nil || spec.Key == nil {
					w.handle(hctx, m)
					continue
				}
				w.handleGroup(hctx, spec.KeyGroup, drain(q, m))
			}
		}(queues[i])
	}

	var group chan *Msg
	if spec.Group != nil && spec.Key != nil {
		group = make(chan *Msg, min(batch, MaxGroup))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range group {
				w.handleGroup(hctx, spec.Group, drain(group, m))
			}
		}()
	}

	var itMu sync.Mutex // guards it: a failed pull replaces it while shutdown may drain it
	stop := context.AfterFunc(ctx, func() {
		itMu.Lock()
		defer itMu.Unlock()
		it.Drain()
	})
	defer stop()
	var rr int
	for {
		raw, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				break
			}
			// A missed heartbeat (the consumer's leader moved when a NATS node left), a deleted consumer, a
			// reconnect: the service must not sit idle. Start over with the consumer and a new pull.
			log.Warn("pull failed; resuming", "consumer", spec.Durable, "err", err)
			metrics.Count("pull_restarts."+spec.Durable, 1)
			it.Stop()
			// Unbound while resuming, so the process is not ready; Bound (kept by Consume) stays.
			rebound := binding(spec.Durable)
			next, rerr := resume(ctx, js, spec, batch)
			rebound(false)
			if rerr != nil {
				break // only when ctx ended
			}
			itMu.Lock()
			it = next
			itMu.Unlock()
			if ctx.Err() != nil {
				next.Drain()
			}
			continue
		}
		for _, m := range w.messages(raw) {
			idx := 0
			var key string
			if spec.Key != nil && m.bad == nil && (workers > 1 || group != nil) {
				key = spec.Key(m)
			}
			if group != nil && key == spec.GroupKey && m.bad == nil {
				group <- m
				continue
			}
			if workers > 1 {
				if spec.Key != nil && m.bad == nil {
					hs := fnv.New32a()
					_, _ = hs.Write([]byte(key))
					idx = int(hs.Sum32() % uint32(workers))
				} else {
					idx = rr % workers
					rr++
				}
			}
			queues[idx] <- m
		}
	}
	for _, q := range queues {
		close(q)
	}
	if group != nil {
		close(group)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		log.Warn("handlers still busy at shutdown; their messages will be redelivered", "consumer", spec.Durable)
		hcancel()
		<-done
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("consumer %s stopped", spec.Durable)
}

// consumerState reads a consumer's lag for /metrics.
func consumerState(cons jetstream.Consumer) metrics.ConsumerInfo {
	return func(ctx context.Context) (metrics.ConsumerState, error) {
		ci, err := cons.Info(ctx)
		if err != nil {
			return metrics.ConsumerState{}, err
		}
		return metrics.ConsumerState{Pending: ci.NumPending, AckPending: uint64(ci.NumAckPending), Redelivered: uint64(ci.NumRedelivered)}, nil
	}
}

// resume re-creates the consumer (idempotent) and a new pull, retrying until it works or ctx ends.
func resume(ctx context.Context, js jetstream.JetStream, spec ConsumerSpec, batch int) (jetstream.MessagesContext, error) {
	delay := 100 * time.Millisecond
	for {
		cons, err := EnsureConsumer(ctx, js, spec)
		if err == nil {
			it, err := pull(cons, spec, batch)
			if err == nil {
				return it, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func (spec ConsumerSpec) pinnedTTL() time.Duration { return orDuration(spec.PinnedTTL, 5*time.Second) }

func (spec ConsumerSpec) maxDeliver() int { return orInt(spec.MaxDeliver, DefaultMaxDeliver) }

// pull starts the continuous pull of a consumer. A pinned client renews its pulls well within the pin
// TTL, so that a live client keeps its pin.
func pull(cons jetstream.Consumer, spec ConsumerSpec, batch int) (jetstream.MessagesContext, error) {
	if spec.PinnedGroup == "" {
		return cons.Messages(jetstream.PullMaxMessages(batch), jetstream.PullExpiry(5*time.Second))
	}
	return cons.Messages(jetstream.PullMaxMessages(batch), jetstream.PullPriorityGroup(spec.PinnedGroup),
		jetstream.PullExpiry(max(time.Second, spec.pinnedTTL()/3)))
}

type worker struct {
	js   jetstream.JetStream
	spec ConsumerSpec
	h    Handler
	log  *slog.Logger

	mu sync.Mutex
	// settled remembers, per batch (by stream sequence) redelivered because some of its entries failed,
	// which entries this process already handled: a redelivery here handles only the others.
	settled map[uint64][]bool
}

// maxSettled bounds the batches remembered; beyond it they are forgotten and handled again in full
// (handlers are idempotent).
const maxSettled = 1024

// messages turns a delivered message into the messages to handle: itself, or its batch's entries.
func (w *worker) messages(raw jetstream.Msg) []*Msg {
	base := Msg{Subject: raw.Subject(), Data: raw.Data(), Header: raw.Headers(), ack: raw}
	if md, err := raw.Metadata(); err == nil {
		base.Delivered = md.NumDelivered
		base.StreamSeq = md.Sequence.Stream
		base.Time = md.Timestamp
	}
	if base.Header.Get(HdrBatch) == "" {
		base.Meta = MetaFrom(base.Header)
		return []*Msg{&base}
	}
	entries, err := Unbatch(base.Subject, base.Header, base.Data)
	if err != nil {
		base.bad = err
		base.Meta = MetaFrom(base.Header)
		return []*Msg{&base}
	}
	w.mu.Lock()
	// A copy: a delivery whose ack wait ran out may still be settling entries of the same batch.
	done := slices.Clone(w.settled[base.StreamSeq])
	w.mu.Unlock()
	b := &batchAck{w: w, raw: raw, seq: base.StreamSeq, n: len(entries)}
	out := make([]*Msg, 0, len(entries))
	for i, e := range entries {
		if i < len(done) && done[i] {
			continue
		}
		m := base
		m.Subject, m.Header, m.Data, m.Meta, m.Index = e.Subject, e.Header, e.Data, MetaFrom(e.Header), i
		m.ack = entryAck{b: b, i: i}
		if e.Subject != base.Subject && (!ValidSubject(e.Subject) || GroupSubject(e.Subject) != base.Subject) {
			// Only events share a batch across subjects (GroupSubject): any other own subject is a lie
			// about where the entry was published, which a handler might believe.
			m.bad = fmt.Errorf("%w: entry %d of a batch on %s names subject %q", ErrMalformed, i, base.Subject, e.Subject)
		}
		out = append(out, &m)
	}
	b.left = len(out)
	if len(out) == 0 {
		b.finish() // every entry was handled before the redelivery
	}
	return out
}

// batchAck settles a batch once every entry handled here is settled: an ack when all succeeded or were
// parked, else a negative acknowledgement with the shortest delay asked, so that it comes back.
type batchAck struct {
	w     *worker
	raw   jetstream.Msg
	seq   uint64
	n     int
	mu    sync.Mutex
	left  int
	nak   bool
	delay time.Duration
}

type entryAck struct {
	b *batchAck
	i int
}

func (e entryAck) Ack() error                         { e.b.settle(e.i, true, 0); return nil }
func (e entryAck) Term() error                        { e.b.settle(e.i, true, 0); return nil }
func (e entryAck) NakWithDelay(d time.Duration) error { e.b.settle(e.i, false, d); return nil }
func (e entryAck) InProgress() error                  { return e.b.raw.InProgress() }

func (b *batchAck) settle(i int, ok bool, delay time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.w.remember(b.seq, b.n, i)
	} else if !b.nak || delay < b.delay {
		b.nak, b.delay = true, delay
	}
	b.left--
	if b.left == 0 {
		b.finish()
	}
}

func (b *batchAck) finish() {
	if b.nak {
		_ = b.raw.NakWithDelay(b.delay)
		return
	}
	b.w.mu.Lock()
	delete(b.w.settled, b.seq)
	b.w.mu.Unlock()
	_ = b.raw.Ack()
}

func (w *worker) remember(seq uint64, n, i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	done := w.settled[seq]
	if done == nil {
		if len(w.settled) >= maxSettled {
			clear(w.settled)
		}
		done = make([]bool, n)
		w.settled[seq] = done
	}
	done[i] = true
}

func (w *worker) handle(ctx context.Context, m *Msg) {
	start := time.Now()
	err := w.safeHandle(ctx, m)
	metrics.Count("handle_us."+w.spec.Durable, time.Since(start).Microseconds())
	w.settle(ctx, m, err)
}

// drain is m and whatever else q holds right now, at most MaxGroup in all.
func drain(q <-chan *Msg, m *Msg) []*Msg {
	ms := []*Msg{m}
	for len(ms) < MaxGroup {
		select {
		case m, ok := <-q:
			if !ok {
				return ms
			}
			ms = append(ms, m)
		default:
			return ms
		}
	}
	return ms
}

// handleGroup hands ms to the group handler g and settles each by its error. Should g panic or
// miscount, each message is handled on its own instead, so one bad message parks only itself.
func (w *worker) handleGroup(ctx context.Context, g GroupHandler, ms []*Msg) {
	start := time.Now()
	errs, ok := w.safeGroup(ctx, g, ms)
	if !ok {
		for _, m := range ms {
			w.handle(ctx, m)
		}
		return
	}
	metrics.Count("group_us."+w.spec.Durable, time.Since(start).Microseconds())
	metrics.Count("groups."+w.spec.Durable, 1)
	for i, m := range ms {
		w.settle(ctx, m, errs[i])
	}
}

func (w *worker) safeGroup(ctx context.Context, g GroupHandler, ms []*Msg) (errs []error, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("group handler panic; handling the messages one by one", "consumer", w.spec.Durable, "panic", r)
			errs, ok = nil, false
		}
	}()
	errs = g(ctx, ms)
	return errs, len(errs) == len(ms)
}

// settle acknowledges, parks or negatively acknowledges m by the error its handler returned. On the
// last delivery the consumer allows, a failure of any kind parks the message: it would not come back.
func (w *worker) settle(ctx context.Context, m *Msg, err error) {
	raw := m.ack
	name := w.spec.Durable
	last := m.Delivered >= uint64(w.spec.maxDeliver())
	var re *RetryError
	switch {
	case err == nil:
		metrics.Count("handled."+name, 1)
		_ = raw.Ack()
	case errors.Is(err, ErrMalformed) || errors.Is(err, ErrPermanent):
		metrics.Count("malformed."+name, 1)
		w.park(ctx, m, err, last)
	case last:
		metrics.Count("gave_up."+name, 1)
		w.park(ctx, m, fmt.Errorf("%w: gave up after %d deliveries: %w", ErrPermanent, m.Delivered, err), true)
	case errors.As(err, &re):
		metrics.Count("retries."+name, 1)
		_ = raw.NakWithDelay(re.Delay)
	default:
		metrics.Count("errors."+name, 1)
		d := backoff(m.Delivered)
		w.log.Warn("handler failed; will retry", "consumer", name, "subject", m.Subject, "delivery", m.Delivered, "in", d, "err", err)
		_ = raw.NakWithDelay(d)
	}
}

// park parks m and terminates it. Should parking fail (NATS unavailable), m is redelivered to try
// again, unless this is its last delivery: then it is terminated unparked, and that is logged.
func (w *worker) park(ctx context.Context, m *Msg, reason error, last bool) {
	name := w.spec.Durable
	if perr := Park(ctx, w.js, m, reason); perr != nil {
		if !last {
			d := backoff(m.Delivered)
			w.log.Error("cannot park message; will retry", "consumer", name, "subject", m.Subject, "in", d, "err", perr)
			_ = m.ack.NakWithDelay(d)
			return
		}
		metrics.Count("unparked."+name, 1)
		w.log.Error("cannot park message on its last delivery; dropped", "consumer", name, "subject", m.Subject,
			"stream_seq", m.StreamSeq, "index", m.Index, "reason", reason, "err", perr)
		_ = m.ack.Term()
		return
	}
	metrics.Count("parked."+name, 1)
	metrics.Parked.WithLabelValues(name).Inc()
	w.log.Warn("message parked", "consumer", name, "subject", m.Subject, "err", reason)
	_ = m.ack.Term()
}

// safeHandle turns a handler panic into a parked message: one bad message never takes a service down.
func (w *worker) safeHandle(ctx context.Context, m *Msg) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: handler panic: %v", ErrPermanent, r)
		}
	}()
	if m.bad != nil {
		return m.bad
	}
	return w.h(ctx, m)
}

// Park copies m to dead.<subject> with the reason in a header. A message that cannot go there (its
// subject is not a valid one, or the publish fails other than for want of NATS) goes to
// SubjDeadFallback instead, with its subject quoted: parking a message never depends on what it says.
// Headers whose names NATS would refuse are left out.
func Park(ctx context.Context, js jetstream.JetStream, m *Msg, reason error) error {
	h := nats.Header{}
	for k, v := range m.Header {
		if k == HdrMsgID || k == HdrBatch || !validHeaderName(k) {
			continue // a parked batch that did not unpack is kept as plain bytes
		}
		h[k] = v
	}
	h.Set(HdrDeadReason, reason.Error())
	h.Set(HdrDeadSubject, m.Subject)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if ValidSubject(m.Subject) {
		_, err := js.PublishMsg(pctx, &nats.Msg{Subject: SubjDeadPrefix + m.Subject, Header: h, Data: m.Data})
		if err == nil || unavailable(err) {
			return err
		}
		h.Set(HdrDeadReason, fmt.Sprintf("%s (not parked on its subject: %v)", reason, err))
	}
	h.Set(HdrDeadSubject, strconv.Quote(m.Subject))
	_, err := js.PublishMsg(pctx, &nats.Msg{Subject: SubjDeadFallback, Header: h, Data: m.Data})
	return err
}

// unavailable reports whether a publish failed for want of NATS (worth retrying as is) rather than
// because of the message.
func unavailable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// validHeaderName reports whether NATS accepts k as a header name: printable ASCII without ':' and
// the separators nats.go refuses.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func backoff(delivered uint64) time.Duration {
	d := 100 * time.Millisecond
	for i := uint64(1); i < delivered && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}

func orInt(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func orDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}
