package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbus/podbus/internal/ctxtime"
	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The pipeline's hot requests to JetStream (acknowledged publishes, compare-and-set writes, reads of one
// key) go through these helpers rather than nats.go's: the same subjects, headers and answers, but an
// acknowledgement is read without reflection and a call without a deadline gets its timeout from a
// pooled timer instead of a new context. Every answer this file does not expect is handed to
// encoding/json, as nats.go would read it.

// Timeouts and retries of nats.go's JetStream API, which these helpers keep.
const (
	jsAPITimeout      = 5 * time.Second
	pubRetryWait      = 250 * time.Millisecond
	jsErrCodeNotFound = jetstream.JSErrCodeMessageNotFound
)

// request sends m and waits for its answer until ctx's deadline, or jsAPITimeout when ctx has none.
func request(ctx context.Context, nc *nats.Conn, m *nats.Msg) (*nats.Msg, error) {
	return requestWithin(ctx, nc, m, jsAPITimeout)
}

// requestWithin is request with timeout instead of jsAPITimeout.
func requestWithin(ctx context.Context, nc *nats.Conn, m *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); ok {
		return nc.RequestMsgWithContext(ctx, m)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nc.RequestMsg(m, timeout)
}

// publishAck stores m on its stream and returns JetStream's acknowledgement, as jetstream's PublishMsg
// does, waiting for it until ctx's deadline, or for jsAPITimeout when ctx has none. A refusal is a
// *jetstream.APIError. Within that time m is sent again while the answer says that sending it again
// may store it (see publishAckWithin).
func publishAck(ctx context.Context, nc *nats.Conn, m *nats.Msg) (*jetstream.PubAck, error) {
	return publishAckWithin(ctx, nc, m, jsAPITimeout, jsAPITimeout)
}

// publishAckWithin is publishAck with its own times when ctx has no deadline: the whole call takes at
// most within (and what a last answer takes), each answer is waited for up to answer. With a
// deadline, ctx's bounds both.
//
// m is sent again, in one loop for every caller:
//   - every 250 ms while no stream answers (no responders: no server took m, so none stored it; a
//     stream's leader still being chosen);
//   - after 100 ms doubling, when m has a de-duplication id, while the stream's leader answers that a
//     copy with that id is still being stored (StoringCopy: a resend after a lost acknowledgement, or
//     another replica of a controller sending the same command). The answer settles on the copy's
//     acknowledgement (a duplicate), or on m stored when the copy was dropped with its leader;
//   - at once, when m has a de-duplication id and its answer did not come in answer, with what is left
//     of within: a copy stored after all makes it a duplicate. (A call with a deadline waits for its
//     answer until then, and ends with ctx's error instead of nats.ErrTimeout.);
//   - after 250 ms, when m has a de-duplication id and the connection gave up its answer to reconnect
//     (nats.ErrDisconnected).
func publishAckWithin(ctx context.Context, nc *nats.Conn, m *nats.Msg, answer, within time.Duration) (*jetstream.PubAck, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(within)
	}
	for copyWait := inProcessWait; ; {
		ack, err := publishAckOnce(ctx, nc, m, min(answer, time.Until(deadline)))
		var wait time.Duration
		switch {
		case errors.Is(err, jetstream.ErrNoStreamResponse):
			metrics.Count("publish.no_stream", 1)
			wait = pubRetryWait
		case StoringCopy(err) && hasID(m):
			metrics.Count("publish.storing_copy", 1)
			wait, copyWait = copyWait, copyWait*2
		case errors.Is(err, nats.ErrTimeout) && hasID(m) && time.Until(deadline) > pubRetryWait:
			metrics.Count("publish.unanswered", 1)
			continue
		case errors.Is(err, nats.ErrDisconnected) && hasID(m):
			// The connection dropped its pending requests to reconnect (a move off a cut-off
			// server): m may be stored; sent again, it is at worst a duplicate.
			metrics.Count("publish.disconnected", 1)
			wait = pubRetryWait
		default:
			return ack, err
		}
		if !time.Now().Add(wait).Before(deadline) || !ctxtime.Sleep(ctx, wait) {
			return ack, err
		}
	}
}

func hasID(m *nats.Msg) bool { return m.Header.Get(HdrMsgID) != "" }

// inProcessWait is the first wait before a message whose copy is still being stored is sent again.
const inProcessWait = 100 * time.Millisecond

// jsErrDuplicateInProcess is nats-server's JSStreamDuplicateMessageConflict.
const jsErrDuplicateInProcess jetstream.ErrorCode = 10158

// StoringCopy says whether err is nats-server's answer to a message whose de-duplication id belongs to a
// copy proposed to the stream's replicas and not yet stored: the message may be stored after all.
func StoringCopy(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrDuplicateInProcess
}

// publishAckOnce sends m once and reads its answer, waiting for it until ctx's deadline, or for answer
// when ctx has none. No responders is ErrNoStreamResponse.
func publishAckOnce(ctx context.Context, nc *nats.Conn, m *nats.Msg, answer time.Duration) (*jetstream.PubAck, error) {
	resp, err := requestWithin(ctx, nc, m, answer)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return nil, err
	}
	return parsePubAck(resp.Data)
}

// parsePubAck reads a publish's answer. The form nats-server writes for a stored message is read by
// hand; any other (an error, a batch's count, a value) by encoding/json.
func parsePubAck(data []byte) (*jetstream.PubAck, error) {
	if ack, ok := parsePlainAck(data); ok {
		return ack, nil
	}
	var resp struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	if resp.PubAck == nil || resp.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return resp.PubAck, nil
}

// parsePlainAck reads {"stream":"S","seq":N} with an optional "duplicate":true after the sequence;
// false for anything else.
func parsePlainAck(data []byte) (*jetstream.PubAck, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"stream":"`))
	if !ok {
		return nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 {
		return nil, false
	}
	for _, c := range rest[:end] {
		if c < 0x20 || c > 0x7e || c == '\\' { // escapes and non-ASCII: encoding/json's to read
			return nil, false
		}
	}
	stream := rest[:end]
	if rest, ok = bytes.CutPrefix(rest[end+1:], []byte(`,"seq":`)); !ok {
		return nil, false
	}
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > 20 || (n > 1 && rest[0] == '0') {
		return nil, false
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil {
		return nil, false
	}
	ack := &jetstream.PubAck{Sequence: seq}
	switch tail := rest[n:]; {
	case string(tail) == "}":
	case string(tail) == `,"duplicate":true}`:
		ack.Duplicate = true
	default:
		return nil, false
	}
	ack.Stream = streamNames.get(stream)
	return ack, true
}

// streamNames keeps the names of the streams acknowledgements came from, so that reading one allocates
// nothing: a process writes to a handful of streams.
var streamNames nameSet

type nameSet struct {
	mu    sync.Mutex
	names atomic.Pointer[map[string]string]
}

const maxNameSet = 256

func (s *nameSet) get(b []byte) string {
	if m := s.names.Load(); m != nil {
		if name, ok := (*m)[string(b)]; ok {
			return name
		}
	}
	name := string(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.names.Load()
	if old != nil && len(*old) >= maxNameSet {
		return name
	}
	next := make(map[string]string, 1+len(mapOrEmpty(old)))
	for k, v := range mapOrEmpty(old) {
		next[k] = v
	}
	next[name] = name
	s.names.Store(&next)
	return name
}

func mapOrEmpty(m *map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	return *m
}

// keyValid is nats.go's check of a KV key: letters, digits and -/_=. without an empty token.
func keyValid(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '/' || c == '_' || c == '=':
		case c == '.':
			if key[i-1] == '.' {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// Headers of a stored message read back.
const (
	hdrStatus       = "Status"
	hdrNatsSequence = "Nats-Sequence"
	hdrNatsStream   = "Nats-Stream"
	statusNotFound  = "404"
	kvOpDelete      = "DEL"
	kvOpPurge       = "PURGE"
)

// lastMsg is the last message of subject in a stream, or errNoMsg when it has none.
type lastMsg struct {
	seq     uint64
	data    []byte
	deleted bool // a KV delete or purge marker
}

var errNoMsg = errors.New("no message")

// getLast reads the last message on subject of stream: a direct get when the stream allows them (any
// replica answers), otherwise the stream leader's message API.
func getLast(ctx context.Context, nc *nats.Conn, stream, subject string, direct bool) (lastMsg, error) {
	if direct {
		resp, err := request(ctx, nc, &nats.Msg{Subject: "$JS.API.DIRECT.GET." + stream + "." + subject})
		if err != nil {
			return lastMsg{}, err
		}
		return readDirect(resp)
	}
	req := make([]byte, 0, len(`{"last_by_subj":""}`)+len(subject))
	req = append(append(append(req, `{"last_by_subj":"`...), subject...), `"}`...)
	return msgGet(ctx, nc, stream, req)
}

// getNext reads the first message on subject of stream at or after seq, from the stream leader's
// message API (a follower's direct get may not have it yet).
func getNext(ctx context.Context, nc *nats.Conn, stream, subject string, seq uint64) (lastMsg, error) {
	req, err := json.Marshal(struct {
		Seq  uint64 `json:"seq"`
		Next string `json:"next_by_subj"`
	}{seq, subject})
	if err != nil {
		return lastMsg{}, err
	}
	return msgGet(ctx, nc, stream, req)
}

// msgGet asks the stream leader's message API for the message req names.
func msgGet(ctx context.Context, nc *nats.Conn, stream string, req []byte) (lastMsg, error) {
	resp, err := request(ctx, nc, &nats.Msg{Subject: "$JS.API.STREAM.MSG.GET." + stream, Data: req})
	if err != nil {
		return lastMsg{}, err
	}
	return readMsgGet(resp.Data)
}

// readDirect reads a direct get's answer: the message itself, with its sequence in a header, or a
// status without a body.
func readDirect(m *nats.Msg) (lastMsg, error) {
	if st := m.Header.Get(hdrStatus); st != "" {
		if st == statusNotFound {
			return lastMsg{}, errNoMsg
		}
		return lastMsg{}, fmt.Errorf("direct get: status %s %s", st, m.Header.Get("Description"))
	}
	if m.Header.Get(hdrNatsStream) == "" {
		return lastMsg{}, jetstream.ErrInvalidJetStreamResponse
	}
	seq, err := strconv.ParseUint(m.Header.Get(hdrNatsSequence), 10, 64)
	if err != nil {
		return lastMsg{}, jetstream.ErrInvalidJetStreamResponse
	}
	op := m.Header.Get(hdrKVOperation)
	return lastMsg{seq: seq, data: m.Data, deleted: op == kvOpDelete || op == kvOpPurge}, nil
}

// readMsgGet reads the message API's answer: JSON with the message's headers and data in base64.
func readMsgGet(data []byte) (lastMsg, error) {
	var resp struct {
		Error   *jetstream.APIError `json:"error,omitempty"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs,omitempty"`
			Data []byte `json:"data,omitempty"`
		} `json:"message,omitempty"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return lastMsg{}, fmt.Errorf("%w: %w", jetstream.ErrInvalidJetStreamResponse, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jsErrCodeNotFound {
			return lastMsg{}, errNoMsg
		}
		return lastMsg{}, resp.Error
	}
	if resp.Message == nil {
		return lastMsg{}, jetstream.ErrInvalidJetStreamResponse
	}
	out := lastMsg{seq: resp.Message.Seq, data: resp.Message.Data}
	if len(resp.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
		if err != nil {
			return lastMsg{}, fmt.Errorf("%w: %w", jetstream.ErrInvalidJetStreamResponse, err)
		}
		op := h.Get(hdrKVOperation)
		out.deleted = op == kvOpDelete || op == kvOpPurge
	}
	return out, nil
}
