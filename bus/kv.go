package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/internal/ctxtime"
	"github.com/podbus/podbus/internal/metrics"
)

// ErrExists is returned by Create when the key is already there.
var ErrExists = errors.New("already exists")

// Get reads key into m and returns its revision; ErrNotFound when absent or deleted.
func Get(ctx context.Context, kv jetstream.KeyValue, key string, m proto.Message) (uint64, error) {
	data, rev, err := GetEncoded(ctx, kv, key)
	if err != nil {
		return 0, err
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return 0, fmt.Errorf("decode %s/%s: %w", kv.Bucket(), key, errors.Join(ErrMalformed, err))
	}
	return rev, nil
}

// GetEncoded is Get for a caller that decodes the value itself, or only part of it (see Prune).
func GetEncoded(ctx context.Context, kv jetstream.KeyValue, key string) ([]byte, uint64, error) {
	if b := bucketOf(kv); b != nil {
		return b.get(ctx, key)
	}
	e, err := retryRead(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return kv.Get(ctx, key) })
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, fmt.Errorf("%s/%s: %w", kv.Bucket(), key, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", kv.Bucket(), key, err)
	}
	return e.Value(), e.Revision(), nil
}

// Create writes key only if it does not exist; ErrExists otherwise.
func Create(ctx context.Context, kv jetstream.KeyValue, key string, m proto.Message) (uint64, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return 0, err
	}
	return CreateEncoded(ctx, kv, key, data)
}

// CreateEncoded is Create for a value already encoded, which the caller may send on (see Splice).
func CreateEncoded(ctx context.Context, kv jetstream.KeyValue, key string, data []byte) (uint64, error) {
	if b := bucketOf(kv); b != nil {
		return b.create(ctx, key, data)
	}
	rev, err := kv.Create(ctx, key, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%s/%s: %w", kv.Bucket(), key, ErrExists)
	}
	if err != nil {
		return 0, fmt.Errorf("create %s/%s: %w", kv.Bucket(), key, err)
	}
	return rev, nil
}

// Update writes key only if its revision is still rev (compare-and-set); ErrConflict otherwise.
// rev 0 means "the key must not exist", like Create.
func Update(ctx context.Context, kv jetstream.KeyValue, key string, m proto.Message, rev uint64) (uint64, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return 0, err
	}
	return UpdateEncoded(ctx, kv, key, data, rev)
}

// UpdateEncoded is Update for a value already encoded, which the caller may send on (see Splice).
func UpdateEncoded(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, rev uint64) (uint64, error) {
	if rev == 0 {
		r, err := CreateEncoded(ctx, kv, key, data)
		if errors.Is(err, ErrExists) {
			return 0, fmt.Errorf("%s/%s: %w", kv.Bucket(), key, ErrConflict)
		}
		return r, err
	}
	if b := bucketOf(kv); b != nil {
		return b.update(ctx, key, data, rev)
	}
	newRev, err := kv.Update(ctx, key, data, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%s/%s at %d: %w", kv.Bucket(), key, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("update %s/%s: %w", kv.Bucket(), key, err)
	}
	return newRev, nil
}

// StoreRevision is the bucket's latest revision: its stream's last sequence. A cache that has applied
// this revision holds every write committed before the call (a read barrier).
func StoreRevision(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	st, err := retryRead(ctx, kv.Status)
	if err != nil {
		return 0, fmt.Errorf("status of bucket %s: %w", kv.Bucket(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("status of bucket %s: unexpected %T", kv.Bucket(), st)
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// lastEntry is the last entry (a value or a delete) whose key matches filter, a key pattern, from the
// stream leader; the zero lastMsg when none does. It waits out missing answers until ctx ends, saying
// so as the start does: a watch's fence (resume.go) is read on the watch's own context, which has no
// deadline.
func (b *Bucket) lastEntry(ctx context.Context, filter string) (lastMsg, error) {
	req, err := json.Marshal(struct {
		Last string `json:"last_by_subj"`
	}{b.prefix + filter})
	if err != nil {
		return lastMsg{}, err
	}
	m, err := retryUnanswered(ctx, "the last entry of "+b.stream+" under "+filter, jsAPITimeout, pubRetryWait,
		func(ctx context.Context) (lastMsg, error) { return msgGet(ctx, b.nc, b.stream, req) })
	if errors.Is(err, errNoMsg) {
		return lastMsg{}, nil
	}
	if err != nil {
		return lastMsg{}, fmt.Errorf("last entry of %s/%s: %w", b.Bucket(), filter, err)
	}
	return m, nil
}

// Delete removes key only if its revision is still rev; ErrConflict otherwise.
func Delete(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64) error {
	var err error
	if b := bucketOf(kv); b != nil {
		err = b.delete(ctx, key, rev)
	} else {
		err = kv.Delete(ctx, key, jetstream.LastRevision(rev))
	}
	if isWrongLastSeq(err) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%s/%s at %d: %w", kv.Bucket(), key, rev, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("delete %s/%s: %w", kv.Bucket(), key, err)
	}
	return nil
}

// Mutate reads key, lets f change it, and writes it back with compare-and-set, retrying on conflicts
// (up to attempts times). f returns false to leave the entry unchanged. The returned revision is the
// entry's revision after the call. ErrNotFound if the key is absent.
func Mutate[T proto.Message](ctx context.Context, kv jetstream.KeyValue, key string, newT func() T, attempts int, f func(T) (bool, error)) (T, uint64, error) {
	var zero T
	for i := 0; i < attempts; i++ {
		m := newT()
		rev, err := Get(ctx, kv, key, m)
		if err != nil {
			return zero, 0, err
		}
		changed, err := f(m)
		if err != nil {
			return zero, rev, err
		}
		if !changed {
			return m, rev, nil
		}
		newRev, err := Update(ctx, kv, key, m, rev)
		if errors.Is(err, ErrConflict) {
			metrics.Count("kv.conflicts."+kv.Bucket(), 1)
			metrics.CASConflicts.WithLabelValues(kv.Bucket()).Inc()
			continue
		}
		if err != nil {
			return zero, 0, err
		}
		return m, newRev, nil
	}
	return zero, 0, fmt.Errorf("%s/%s: %w after %d attempts", kv.Bucket(), key, ErrConflict, attempts)
}

// Bucket is a KV bucket opened by OpenBucket: Get, Create and Update on it (the helpers of this file)
// go through the lean requests of jsapi.go; everything else is nats.go's KeyValue.
type Bucket struct {
	jetstream.KeyValue
	nc     *nats.Conn
	stream string // KV_<bucket>
	prefix string // $KV.<bucket>.
	direct bool   // the stream answers direct gets
}

// bucketOf is kv when it is a Bucket, or the Bucket a hub's handle wraps; nil otherwise.
func bucketOf(kv jetstream.KeyValue) *Bucket {
	switch k := kv.(type) {
	case *Bucket:
		return k
	case sharedKV:
		return bucketOf(k.KeyValue)
	}
	return nil
}

func newBucket(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) (*Bucket, error) {
	st, err := Retry(ctx, 0, func(ctx context.Context) (jetstream.KeyValueStatus, error) { return kv.Status(ctx) })
	if err != nil {
		return nil, fmt.Errorf("status of bucket %s: %w", kv.Bucket(), err)
	}
	b := &Bucket{KeyValue: kv, nc: js.Conn(), stream: KVStream(kv.Bucket()), prefix: "$KV." + kv.Bucket() + "."}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		b.direct = bs.StreamInfo().Config.AllowDirect
	}
	return b, nil
}

func (b *Bucket) get(ctx context.Context, key string) ([]byte, uint64, error) {
	if !keyValid(key) {
		return nil, 0, fmt.Errorf("get %s/%s: %w", b.Bucket(), key, jetstream.ErrInvalidKey)
	}
	m, err := retryRead(ctx, func(ctx context.Context) (lastMsg, error) {
		return getLast(ctx, b.nc, b.stream, b.prefix+key, b.direct)
	})
	if errors.Is(err, errNoMsg) || (err == nil && m.deleted) {
		return nil, 0, fmt.Errorf("%s/%s: %w", b.Bucket(), key, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", b.Bucket(), key, err)
	}
	return m.data, m.seq, nil
}

// retryRead is read, sent again through Retry when ctx's deadline is further than jsAPITimeout: a
// caller with a long deadline (an API request's) would otherwise wait for all of it when the read gets
// no answer. Without a deadline each read already has jsAPITimeout and fails after it, and the caller
// decides; with a short one there is no time to ask twice.
func retryRead[T any](ctx context.Context, read func(context.Context) (T, error)) (T, error) {
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) <= jsAPITimeout {
		return read(ctx)
	}
	return Retry(ctx, jsAPITimeout, read)
}

// write stores data under key if key's last revision is still rev (0: none).
func (b *Bucket) write(ctx context.Context, key string, data []byte, rev uint64) (uint64, error) {
	if !keyValid(key) {
		return 0, jetstream.ErrInvalidKey
	}
	m := &nats.Msg{Subject: b.prefix + key, Data: data, Header: nats.Header{hdrExpectedLastSubjSeq: {strconv.FormatUint(rev, 10)}}}
	return b.cas(ctx, m, rev, b.send)
}

// delete marks key deleted if its last revision is still rev, as kv.Delete with LastRevision does
// (rev 0: whatever it is).
func (b *Bucket) delete(ctx context.Context, key string, rev uint64) error {
	if !keyValid(key) {
		return jetstream.ErrInvalidKey
	}
	m := &nats.Msg{Subject: b.prefix + key, Header: nats.Header{hdrKVOperation: {kvOpDelete}}}
	if rev > 0 {
		m.Header.Set(hdrExpectedLastSubjSeq, strconv.FormatUint(rev, 10))
	}
	_, err := b.cas(ctx, m, rev, b.send)
	return err
}

func (b *Bucket) send(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	return publishAck(ctx, b.nc, m)
}

// casSends bounds how often cas sends one write.
const casSends = 4

// cas sends m, a compare-and-set of its key at rev (0: none), through send. When the answer is lost
// (nats.ErrDisconnected: the connection moved off a server cut off from its cluster; nats.ErrTimeout:
// none came, as when a stream's leader is being chosen), m may have been stored, or may still be, and
// sent again it would then be refused. The key's last message tells: one after rev that holds what m
// writes (its data, or a delete marker) is m's effect; the key still at rev means m is not stored yet,
// and it is sent again: if the first copy is stored after all, the second is refused, and that refusal
// is checked the same way. A later revision of another write leaves m stored right after rev or never:
// the message after rev tells, while the bucket's history holds rev (then m's refusal is a conflict).
// Anything else leaves m's fate unknown, and the error stands.
func (b *Bucket) cas(ctx context.Context, m *nats.Msg, rev uint64, send func(context.Context, *nats.Msg) (*jetstream.PubAck, error)) (uint64, error) {
	lost := false
	for i := 1; ; i++ {
		ack, err := send(ctx, m)
		if err == nil {
			return ack.Sequence, nil
		}
		// A copy sent again after a lost answer is refused when the first was stored after all.
		if (!answerLost(err) && !(lost && isWrongLastSeq(err))) || ctx.Err() != nil {
			return 0, err
		}
		lost = true
		last, gerr := retryRead(ctx, func(ctx context.Context) (lastMsg, error) {
			return getLast(ctx, b.nc, b.stream, m.Subject, b.direct)
		})
		switch {
		case gerr == nil && last.seq > rev && writes(m, last):
			metrics.Count("kv.lost_answer.stored", 1)
			return last.seq, nil
		case gerr == nil && last.seq > rev && rev > 0:
			// Another write came after rev. m could only be stored right after rev, so the key's
			// message after rev tells, while the bucket's history still holds rev.
			next, ok := b.successor(ctx, m.Subject, rev)
			switch {
			case !ok:
				return 0, err
			case writes(m, next):
				metrics.Count("kv.lost_answer.stored", 1)
				return next.seq, nil
			}
			metrics.Count("kv.lost_answer.refused", 1)
			return 0, errSettledRefusal
		case answerLost(err) && i < casSends &&
			((gerr == nil && last.seq == rev) || (rev == 0 && errors.Is(gerr, errNoMsg))):
			metrics.Count("kv.lost_answer.resent", 1)
			if !ctxtime.Sleep(ctx, pubRetryWait) {
				return 0, err
			}
		default:
			return 0, err
		}
	}
}

// errSettledRefusal is a compare-and-set whose answer was lost and which the key shows was not stored
// and can no longer be: another write followed its revision. It reads as JetStream's refusal.
var errSettledRefusal = &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence,
	Description: "wrong last sequence (another write followed the revision while the answer was lost)"}

// successor reads the message on subject right after revision rev, if the stream still holds rev's:
// a subject's history drops its oldest messages first, so then every later one is held too.
func (b *Bucket) successor(ctx context.Context, subject string, rev uint64) (lastMsg, bool) {
	at, err := retryRead(ctx, func(ctx context.Context) (lastMsg, error) { return getNext(ctx, b.nc, b.stream, subject, rev) })
	if err != nil || at.seq != rev {
		return lastMsg{}, false
	}
	next, err := retryRead(ctx, func(ctx context.Context) (lastMsg, error) { return getNext(ctx, b.nc, b.stream, subject, rev+1) })
	return next, err == nil
}

// answerLost says whether err means a write's answer was lost: it may have been stored.
func answerLost(err error) bool {
	return errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrTimeout)
}

// writes says whether last is what m writes: a delete marker for a delete, m's data for a put.
func writes(m *nats.Msg, last lastMsg) bool {
	if m.Header.Get(hdrKVOperation) == kvOpDelete {
		return last.deleted
	}
	return !last.deleted && bytes.Equal(last.data, m.Data)
}

// create is kv.Create: a key whose last revision is a delete or purge marker may be created again.
func (b *Bucket) create(ctx context.Context, key string, data []byte) (uint64, error) {
	rev, err := b.write(ctx, key, data, 0)
	if isWrongLastSeq(err) {
		if m, gerr := getLast(ctx, b.nc, b.stream, b.prefix+key, b.direct); gerr == nil && m.deleted {
			rev, err = b.write(ctx, key, data, m.seq)
		}
	}
	if isWrongLastSeq(err) {
		return 0, fmt.Errorf("%s/%s: %w", b.Bucket(), key, ErrExists)
	}
	if err != nil {
		return 0, fmt.Errorf("create %s/%s: %w", b.Bucket(), key, err)
	}
	return rev, nil
}

func (b *Bucket) update(ctx context.Context, key string, data []byte, rev uint64) (uint64, error) {
	newRev, err := b.write(ctx, key, data, rev)
	if isWrongLastSeq(err) {
		return 0, fmt.Errorf("%s/%s at %d: %w", b.Bucket(), key, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("update %s/%s: %w", b.Bucket(), key, err)
	}
	return newRev, nil
}

// isWrongLastSeq says err is JetStream's refusal of a compare-and-set (10164 on replicated streams).
func isWrongLastSeq(err error) bool {
	apiErr := apiError(err)
	return apiErr != nil && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// apiError is err's JetStream API error, or nil. The target of errors.As escapes, so it is declared only
// for a failure: declared up front, it would cost every successful write an allocation.
func apiError(err error) *jetstream.APIError {
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return nil
}
