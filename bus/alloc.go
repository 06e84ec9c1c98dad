package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Keys of the alloc bucket. A node's keys all start with its token, which has no dot, so one node's
// keys never match another's filter whatever dots the names hold.
const (
	allocPodPart  = ".p."
	allocMetaPart = ".m"
)

// AllocPodKey is the alloc key of a pod placed on node.
func AllocPodKey(node, uid string) string { return Token(node) + allocPodPart + Token(uid) }

// AllocMetaKey is the alloc key of node's preemptions: its nominated pods and its victims' marks.
func AllocMetaKey(node string) string { return Token(node) + allocMetaPart }

// AllocNodeFilter matches every alloc key of node.
func AllocNodeFilter(node string) string { return Token(node) + ".>" }

// SplitAllocKey reverses AllocPodKey (uid set) and AllocMetaKey (uid ""); ok is false for any other key.
func SplitAllocKey(key string) (node, uid string, ok bool) {
	tok, rest, found := strings.Cut(key, ".")
	if !found {
		return "", "", false
	}
	node, ok = Untoken(tok)
	if !ok {
		return "", "", false
	}
	switch {
	case "."+rest == allocMetaPart:
		return node, "", true
	case strings.HasPrefix("."+rest, allocPodPart):
		uid, ok = Untoken(rest[len(allocPodPart)-1:])
		return node, uid, ok && uid != ""
	}
	return "", "", false
}

// Headers of a compare-and-set over a subject filter (nats-server checks the last sequence of any
// subject the filter matches) and of a KV delete.
const (
	hdrExpectedLastSubjSeq     = "Nats-Expected-Last-Subject-Sequence"
	hdrExpectedLastSubjSeqSubj = "Nats-Expected-Last-Subject-Sequence-Subject"
	hdrKVOperation             = "KV-Operation"
)

// ConflictError is the ErrConflict of WriteUnder; Rev is the last revision under the filter when the
// server said it (0: it did not).
type ConflictError struct {
	Key string
	Rev uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s: %v (now at revision %d)", e.Key, ErrConflict, e.Rev)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// WriteUnder writes data to key of kv (deletes key when del), only if the last revision of any key
// matching filter is still rev (0: no key matches). It returns the new revision; a *ConflictError
// (errors.Is ErrConflict) otherwise. One message, so it costs what a compare-and-set of one key costs,
// however many keys the filter matches.
func WriteUnder(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, data []byte, del bool, filter string, rev uint64) (uint64, error) {
	prefix := "$KV." + kv.Bucket() + "."
	m := nats.NewMsg(prefix + key)
	m.Data = data
	m.Header.Set(hdrExpectedLastSubjSeq, strconv.FormatUint(rev, 10))
	m.Header.Set(hdrExpectedLastSubjSeqSubj, prefix+filter)
	if del {
		m.Data = nil
		m.Header.Set(hdrKVOperation, "DEL")
	}
	ack, err := publishAck(ctx, js.Conn(), m)
	if apiErr := apiError(err); apiErr != nil && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		ce := &ConflictError{Key: kv.Bucket() + "/" + key}
		if _, n, ok := strings.Cut(apiErr.Description, ": "); ok {
			ce.Rev, _ = strconv.ParseUint(n, 10, 64)
		}
		return 0, ce
	}
	if err != nil {
		return 0, fmt.Errorf("write %s/%s: %w", kv.Bucket(), key, err)
	}
	return ack.Sequence, nil
}

// KVWrite is one write of WriteAllUnder: Key's new value, or its deletion when Delete.
type KVWrite struct {
	Key    string
	Data   []byte
	Delete bool
}

// ErrAtomicDisabled says the bucket's stream does not take atomic batches (AllowAtomicPublish unset,
// as on a stream provisioned before it was); the caller writes one key at a time instead.
var ErrAtomicDisabled = errors.New("atomic batch publish disabled on the stream")

// Headers of an atomic batch publish (nats-server 2.12+).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// WriteAllUnder is WriteUnder for several keys at once: one atomic batch whose first message carries
// the compare-and-set on filter at rev, so either every write is stored, with nothing else under the
// filter in between, or none is. It costs one round trip whatever the number of writes, and returns
// the revision of the last. A single write is a plain WriteUnder.
func WriteAllUnder(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, ws []KVWrite, filter string, rev uint64) (uint64, error) {
	switch len(ws) {
	case 0:
		return rev, nil
	case 1:
		return WriteUnder(ctx, js, kv, ws[0].Key, ws[0].Data, ws[0].Delete, filter, rev)
	}
	prefix := "$KV." + kv.Bucket() + "."
	id := nuid.Next()
	nc := js.Conn()
	var ack *jetstream.PubAck
	var err error
	for i, w := range ws {
		m := nats.NewMsg(prefix + w.Key)
		m.Data = w.Data
		if w.Delete {
			m.Data = nil
			m.Header.Set(hdrKVOperation, "DEL")
		}
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i == 0 {
			m.Header.Set(hdrExpectedLastSubjSeq, strconv.FormatUint(rev, 10))
			m.Header.Set(hdrExpectedLastSubjSeqSubj, prefix+filter)
		}
		if i < len(ws)-1 {
			// Staged by the server until the commit; a failure is answered to the commit.
			if err = nc.PublishMsg(m); err != nil {
				return 0, fmt.Errorf("write %s/%s: %w", kv.Bucket(), w.Key, err)
			}
			continue
		}
		m.Header.Set(hdrBatchCommit, "1")
		ack, err = publishAck(ctx, nc, m)
	}
	if apiErr := apiError(err); apiErr != nil {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			ce := &ConflictError{Key: kv.Bucket() + "/" + filter}
			if _, n, ok := strings.Cut(apiErr.Description, ": "); ok {
				ce.Rev, _ = strconv.ParseUint(n, 10, 64)
			}
			return 0, ce
		case jsErrCodeAtomicPublishDisabled:
			return 0, fmt.Errorf("write %s/%s: %w", kv.Bucket(), filter, ErrAtomicDisabled)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("write %d keys under %s/%s: %w", len(ws), kv.Bucket(), filter, err)
	}
	return ack.Sequence, nil
}

// jsErrCodeAtomicPublishDisabled is nats-server's JSAtomicPublishDisabledErr.
const jsErrCodeAtomicPublishDisabled jetstream.ErrorCode = 10174
