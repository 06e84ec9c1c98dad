package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	ack, err := js.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
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
