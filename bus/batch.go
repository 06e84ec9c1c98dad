package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// HdrBatch marks a stored message that holds several pipeline messages (a pb.Batch); its value is
// their count.
const HdrBatch = "Podbus-Batch"

// Batch limits. Entry positions (Msg.Position) leave room for MaxBatchEntries per stored message; the
// byte limit keeps a batch well below the server's default max_payload (1 MiB).
const (
	MaxBatchEntries = 256
	maxBatchBytes   = 512 << 10
	// defaultBatchTTL is how long a group is sent again for (see publishAckWithin), unless
	// WithPublishTTL says otherwise; each answer is waited for up to half of it, at most
	// batchAnswerWait.
	defaultBatchTTL = 10 * time.Second
	batchAnswerWait = 5 * time.Second
	// PositionBits: a position (Msg.Position) is stream sequence << PositionBits | entry index.
	PositionBits = 10
	// defaultLinger is how long a group waits for company when its batcher stored another group within
	// lingerWithin (see WithLinger).
	defaultLinger = time.Millisecond
	lingerWithin  = 10 * time.Millisecond
)

// Batcher publishes messages in groups (group commit): a message queued while an earlier group of its
// subject waits for its acknowledgement goes out with the next group, as one stored message. Under
// load the stages store one message per group instead of one per pod; when idle, a group holds one
// message and is stored as that message itself, de-duplication id included. Each subject keeps its
// order: groups go out one at a time, their messages in the order they were queued.
//
// Messages are grouped by GroupSubject: by subject, except events, grouped per namespace. An entry on
// another subject than its batch's keeps its own in HdrSubject.
//
// At a steady rate below what fills groups while an acknowledgement is awaited (a thousand pods a
// second, say), most groups would hold one message, each a store and an acknowledgement of its own. So
// a group whose batcher stored another in the last few milliseconds waits a moment (WithLinger) for
// the messages behind it before it goes out. A message of an idle batcher goes at once.
//
// A batch's de-duplication id is derived from its entries' ids (BatchMsgID), so the same group sent again
// after a lost acknowledgement is stored once. A message sent again in another group, or in a group
// with an entry that has no id, is stored again: consumers of batched subjects must be idempotent, as
// they are for redeliveries.
type Batcher struct {
	js       jetstream.JetStream
	actor    string
	ttl      time.Duration
	linger   time.Duration
	epoch    time.Time    // sent is measured from it, on the monotonic clock
	sent     atomic.Int64 // when a group's store last ended, in ns since epoch (0: never)
	mu       sync.Mutex
	subjects map[string]*batchQueue
}

type batchQueue struct {
	items    []*batchItem
	flushing bool
}

// batchItem is a queued message, kept as its parts: most go out inside a batch, which takes their
// data and headers from these, so a message of its own is built only for a group of one.
type batchItem struct {
	subject string
	data    []byte
	meta    Meta // with the actor
	ok      chan *jetstream.PubAck
	err     chan error
}

// message is the item as a message of its own.
func (it *batchItem) message() *nats.Msg {
	return &nats.Msg{Subject: it.subject, Data: it.data, Header: it.meta.header()}
}

// BatcherOption sets an option of NewBatcher.
type BatcherOption func(*Batcher)

// WithPublishTTL makes the batcher send a group again for up to ttl (defaultBatchTTL otherwise): a
// caller that waits longer for its message's effect than that lets a longer outage pass. A group goes
// out after the one before it on its subject, so the TTL also bounds how long an outage holds them.
func WithPublishTTL(ttl time.Duration) BatcherOption {
	return func(b *Batcher) {
		if ttl > 0 {
			b.ttl = ttl
		}
	}
}

// WithLinger sets how long a group waits for more messages when its batcher stored another group in the
// last 10 ms (1 ms by default; 0: never). The wait trades that much latency under a steady load for
// fewer stores and acknowledgements.
func WithLinger(d time.Duration) BatcherOption {
	return func(b *Batcher) { b.linger = max(d, 0) }
}

// NewBatcher returns a batcher that signs every message with actor, like NewPublisher.
func NewBatcher(js jetstream.JetStream, actor string, opts ...BatcherOption) *Batcher {
	b := &Batcher{js: js, actor: actor, ttl: defaultBatchTTL, linger: defaultLinger, epoch: time.Now(),
		subjects: map[string]*batchQueue{}}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Publish queues m and returns once the group holding it is stored.
func (b *Batcher) Publish(ctx context.Context, subject string, m proto.Message, meta Meta) error {
	f, err := b.PublishAsync(subject, m, meta)
	if err != nil {
		return err
	}
	return Wait(ctx, f)
}

// PublishAsync queues m and returns its future; the caller must wait on it (Wait) before it
// acknowledges whatever caused the publish.
func (b *Batcher) PublishAsync(subject string, m proto.Message, meta Meta) (jetstream.PubAckFuture, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %T for %s: %w", m, subject, err)
	}
	return b.queue(subject, data, meta), nil
}

// PublishEncoded is Publish for a message already encoded (see Splice).
func (b *Batcher) PublishEncoded(ctx context.Context, subject string, data []byte, meta Meta) error {
	return Wait(ctx, b.queue(subject, data, meta))
}

// PublishEncodedAsync is PublishAsync for a message already encoded (see Splice); it never fails.
func (b *Batcher) PublishEncodedAsync(subject string, data []byte, meta Meta) (jetstream.PubAckFuture, error) {
	return b.queue(subject, data, meta), nil
}

func (b *Batcher) queue(subject string, data []byte, meta Meta) *batchItem {
	meta.Actor = b.actor
	it := &batchItem{subject: subject, data: data, meta: meta, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	group := GroupSubject(subject)
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.subjects[group]
	if q == nil {
		q = &batchQueue{}
		b.subjects[group] = q
	}
	q.items = append(q.items, it)
	if !q.flushing {
		// The flusher lives while its group has messages queued, and ends when the queue is empty.
		q.flushing = true
		go b.flush(group, q)
	}
	return it
}

// busy says whether a group's store ended within lingerWithin.
func (b *Batcher) busy() bool {
	last := b.sent.Load()
	return last != 0 && time.Duration(int64(time.Since(b.epoch))-last) < lingerWithin
}

func (b *Batcher) flush(subject string, q *batchQueue) {
	if b.linger > 0 && b.busy() {
		// Only the first group waits: the later ones are what queued while the one before was stored.
		time.Sleep(b.linger)
	}
	for {
		b.mu.Lock()
		n, size := 0, 0
		for n < len(q.items) && n < MaxBatchEntries && (n == 0 || size+len(q.items[n].data) <= maxBatchBytes) {
			size += len(q.items[n].data)
			n++
		}
		if n == 0 {
			q.flushing = false
			delete(b.subjects, subject)
			b.mu.Unlock()
			return
		}
		group := q.items[:n:n]
		q.items = q.items[n:]
		b.mu.Unlock()

		var msg *nats.Msg
		if n == 1 {
			msg = group[0].message()
		} else {
			msg = packBatch(subject, b.actor, group)
		}
		ack, err := b.publish(msg)
		b.sent.Store(max(int64(time.Since(b.epoch)), 1))
		if err == nil && n > 1 {
			metrics.Count("batch.groups", 1)
			metrics.Count("batch.entries", int64(n))
		}
		finish(group, ack, err)
	}
}

// publish stores msg, sending it again within the batcher's TTL (see publishAckWithin): while a
// stream's leader is chosen, or after a lost acknowledgement.
func (b *Batcher) publish(msg *nats.Msg) (*jetstream.PubAck, error) {
	return publishAckWithin(context.Background(), b.js.Conn(), msg, min(b.ttl/2, batchAnswerWait), b.ttl)
}

func finish(group []*batchItem, ack *jetstream.PubAck, err error) {
	for _, it := range group {
		if err != nil {
			it.err <- err
		} else {
			it.ok <- ack
		}
	}
}

func packBatch(subject, actor string, group []*batchItem) *nats.Msg {
	data := appendBatch(nil, subject, group)
	hdr := nats.Header{HdrBatch: {strconv.Itoa(len(group))}, HdrActor: {actor}}
	ids := make([]string, len(group))
	for i, it := range group {
		ids[i] = it.meta.MsgID
	}
	if id := BatchMsgID(subject, ids); id != "" {
		hdr.Set(HdrMsgID, id)
	}
	return &nats.Msg{Subject: subject, Data: data, Header: hdr}
}

// BatchMsgID is the de-duplication id of a batch on subject whose entries have the message ids ids, in
// any order: the same messages grouped again by concurrent workers may queue in another order; "" when
// one of them has none (such an entry could not be de-duplicated alone either).
func BatchMsgID(subject string, ids []string) string {
	h := sha256.New()
	h.Write([]byte(subject))
	for _, id := range slices.Sorted(slices.Values(ids)) {
		if id == "" {
			return ""
		}
		h.Write([]byte{0})
		h.Write([]byte(id))
	}
	return "batch-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// appendBatch appends the pb.Batch of group's messages, written field by field with protowire, so that
// no BatchEntry or header map is built per message only to be copied again by the generated code.
// Each entry keeps its message's headers but the actor (the batch's), and its subject when it is not
// the batch's (HdrSubject).
func appendBatch(b []byte, subject string, group []*batchItem) []byte {
	// Sized first, so the batch is allocated once instead of grown on every hot publish.
	sizes := make([]int, len(group))
	total := 0
	for i, it := range group {
		sizes[i] = entrySize(it, ownSubject(it, subject))
		total += protowire.SizeTag(1) + protowire.SizeBytes(sizes[i])
	}
	b = slices.Grow(b, total)
	for i, it := range group {
		b = protowire.AppendTag(b, 1, protowire.BytesType) // Batch.entries
		b = protowire.AppendVarint(b, uint64(sizes[i]))
		b = protowire.AppendTag(b, 1, protowire.BytesType) // BatchEntry.data
		b = protowire.AppendBytes(b, it.data)
		for k, v := range it.meta.values() {
			if v != "" && metaHeaders[k] != HdrActor {
				b = appendMapEntry(b, metaHeaders[k], v)
			}
		}
		if own := ownSubject(it, subject); own != "" {
			b = appendMapEntry(b, HdrSubject, own)
		}
	}
	return b
}

// ownSubject is the item's subject when it is not its batch's ("" otherwise).
func ownSubject(it *batchItem, batch string) string {
	if it.subject != batch {
		return it.subject
	}
	return ""
}

// entrySize is the size of the item's BatchEntry.
func entrySize(it *batchItem, own string) int {
	size := protowire.SizeTag(1) + protowire.SizeBytes(len(it.data))
	for k, v := range it.meta.values() {
		if v != "" && metaHeaders[k] != HdrActor {
			size += protowire.SizeTag(2) + protowire.SizeBytes(mapEntrySize(metaHeaders[k], v))
		}
	}
	if own != "" {
		size += protowire.SizeTag(2) + protowire.SizeBytes(mapEntrySize(HdrSubject, own))
	}
	return size
}

func mapEntrySize(k, v string) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(len(v))
}

func appendMapEntry(b []byte, k, v string) []byte {
	b = protowire.AppendTag(b, 2, protowire.BytesType) // BatchEntry.headers
	b = protowire.AppendVarint(b, uint64(mapEntrySize(k, v)))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// The batchItem is the future of its message.
func (it *batchItem) Ok() <-chan *jetstream.PubAck { return it.ok }
func (it *batchItem) Err() <-chan error            { return it.err }
func (it *batchItem) Msg() *nats.Msg               { return it.message() }

// Unbatch returns the messages a stored message on subject stands for: its entries when it is a batch
// (each with the batch's headers under its own, and its own subject: the batch's unless HdrSubject
// names another), else the message itself. A batch that does not decode is ErrMalformed.
func Unbatch(subject string, header nats.Header, data []byte) ([]Entry, error) {
	if header.Get(HdrBatch) == "" {
		return []Entry{{Header: header, Data: data, Subject: subject}}, nil
	}
	entries, err := parseBatch(subject, data, header)
	if err != nil {
		return nil, fmt.Errorf("decode batch: %w", errors.Join(ErrMalformed, err))
	}
	if len(entries) == 0 || len(entries) > MaxBatchEntries {
		return nil, fmt.Errorf("%w: batch of %d entries", ErrMalformed, len(entries))
	}
	return entries, nil
}

// parseBatch reads a pb.Batch with protowire: the entries' payloads stay slices of data instead of
// copies (proto.Unmarshal copies bytes fields), which matters on the hot path of every consumer. Each
// entry's headers are the batch's (but its id and batch count: an entry's own id is its identity) under
// its own; its subject is the batch's unless HdrSubject names another.
func parseBatch(subject string, data []byte, batch nats.Header) ([]Entry, error) {
	var out []Entry
	err := fields(data, func(num protowire.Number, v []byte) error {
		if num != 1 { // Batch.entries
			return nil
		}
		e := Entry{Header: make(nats.Header, len(batch)+6), Subject: subject}
		for k, v := range batch {
			if k != HdrBatch && k != HdrMsgID {
				e.Header[k] = v
			}
		}
		var vals []string // the entry's header values, one allocation for all of them
		err := fields(v, func(num protowire.Number, v []byte) error {
			switch num {
			case 1: // BatchEntry.data
				e.Data = v
			case 2: // BatchEntry.headers: map entries of key 1, value 2
				var k, val string
				err := fields(v, func(num protowire.Number, v []byte) error {
					switch num {
					case 1:
						k = headerName(v)
					case 2:
						val = string(v)
					}
					return nil
				})
				if err != nil {
					return err
				}
				if k == HdrSubject {
					e.Subject = val
					return nil
				}
				if vals == nil {
					vals = make([]string, 0, 8)
				}
				vals = append(vals, val)
				e.Header[k] = vals[len(vals)-1 : len(vals) : len(vals)]
			}
			return nil
		})
		out = append(out, e)
		return err
	})
	return out, err
}

// headerName is b as a string, without a copy for the headers podbus sets.
func headerName(b []byte) string {
	for _, h := range metaHeaders {
		if string(b) == h {
			return h
		}
	}
	return string(b)
}

// fields calls fn with the number and contents of each length-delimited field of a message, and
// skips the fields of other wire types.
func fields(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := fn(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// Entry is one message of a stored message (Unbatch).
type Entry struct {
	Header nats.Header
	Data   []byte
	// Subject is the entry's own subject: the stored message's, or the one HdrSubject names.
	Subject string
}
