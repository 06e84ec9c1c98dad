// Package audit reads podbus's audit log, the AUDIT stream (bus.AuditConfig): it replays records,
// prints a pod's timeline, rebuilds the store from the history alone to prove it complete (Verify), and
// re-runs recorded scheduling decisions with another scheduler profile (WhatIf). It only reads.
//
// A record is one message of the log with its original subject and headers: a pipeline step
// ("pod.scheduled"), a Kubernetes event ("event.<ns>.<name>") or a bucket write ("$KV.pods.<ns>.<name>",
// with KV-Operation DEL on deletes). Nats-Stream-Source names the stream it came from and its sequence
// there, which for a bucket record is the store revision it produced.
package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// ErrDifferences is returned by Verify when the history does not rebuild the live store.
var ErrDifferences = errors.New("the history does not match the live store")

// ErrNotFound is returned when a pod has no record in the history.
var ErrNotFound = errors.New("not found in the audit log")

// Record is one audit log message; a batch (bus.Batcher) gives one record per entry.
type Record struct {
	Seq     uint64 // in the audit stream
	Index   int    // of the entry in its batch (0 for a message stored alone)
	Time    time.Time
	Subject string
	Header  nats.Header
	Data    []byte
}

// Actor is the service replica that published the record (empty on bucket records).
func (r *Record) Actor() string { return r.Header.Get(bus.HdrActor) }

// UID is the pod uid the record is about, from its header.
func (r *Record) UID() string { return r.Header.Get(bus.HdrPodUID) }

// Deleted reports a bucket record that deletes (or purges) its key.
func (r *Record) Deleted() bool {
	op := r.Header.Get(bus.HdrKVOperation)
	return op == "DEL" || op == "PURGE"
}

// Origin is the stream the record was sourced from and its sequence there (for a bucket: the revision).
// ok is false for a record without the header (a copy of a copy).
func (r *Record) Origin() (stream string, seq uint64, ok bool) {
	// The first two fields, cut rather than split: replay asks this of every record.
	stream, rest := nextField(r.Header.Get(hdrStreamSource))
	num, _ := nextField(rest)
	if num == "" {
		return "", 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return stream, n, true
}

// nextField returns the first field of s as strings.Fields would, and what follows it.
func nextField(s string) (field, rest string) {
	s = strings.TrimLeft(s, " \t\r\n\v\f")
	if i := strings.IndexAny(s, " \t\r\n\v\f"); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

// Bucket returns the bucket and key of a bucket record.
func (r *Record) Bucket() (bucket, key string, ok bool) {
	rest, found := strings.CutPrefix(r.Subject, "$KV.")
	if !found {
		return "", "", false
	}
	return strings.Cut(rest, ".")
}

// NewMessage returns an empty message of the type carried on subject, nil for subjects whose payload is
// not protobuf (dead letters).
func NewMessage(subject string) proto.Message {
	head, rest, _ := strings.Cut(subject, ".")
	switch head {
	case "pod":
		kind, _, _ := strings.Cut(rest, ".")
		switch kind {
		case "cmd":
			return &pb.PodCommand{}
		case "pending":
			return &pb.PendingPod{}
		case "scheduled":
			return &pb.SchedulingDecision{}
		case "bound":
			return &pb.PodBinding{}
		case "terminate":
			return &pb.PodTermination{}
		case "deleted":
			return &pb.PodDeleted{}
		}
	case "status":
		return &pb.PodStatusReport{}
	case "node":
		return &pb.NodeHeartbeat{}
	case "event":
		return &pb.Event{}
	case "$KV":
		bucket, _, _ := strings.Cut(rest, ".")
		switch bucket {
		case bus.BucketPods:
			return &pb.Pod{}
		case bus.BucketNodes:
			return &pb.Node{}
		case bus.BucketAlloc:
			// A pod's key holds its allocation, a node's meta key its preemptions.
			if _, uid, ok := bus.SplitAllocKey(strings.TrimPrefix(rest, bucket+".")); ok && uid != "" {
				return &pb.PodAllocation{}
			}
			return &pb.NodeAllocation{}
		}
	}
	return nil
}

// Decode decodes the record's payload by its subject: nil for deletes and unknown subjects.
func (r *Record) Decode() (proto.Message, error) {
	m := NewMessage(r.Subject)
	if m == nil || r.Deleted() {
		return nil, nil
	}
	if err := proto.Unmarshal(r.Data, m); err != nil {
		return nil, fmt.Errorf("record %d (%s): %w", r.Seq, r.Subject, errors.Join(bus.ErrMalformed, err))
	}
	return m, nil
}

// ScanOptions select records.
type ScanOptions struct {
	Stream   string   // default bus.StreamAudit
	Filters  []string // subjects; none: all
	StartSeq uint64   // first sequence (takes precedence over Since)
	Since    time.Time
	Until    time.Time // stop after this time (zero: the end)
	UntilSeq uint64    // stop after this sequence (zero: the end)
	// Follow keeps reading new records until ctx ends instead of stopping at the end.
	Follow bool
	Batch  int // messages per pull (default 4096)
	// RequestTimeout bounds each JetStream API request of the scan (default bus.DefaultRequestTimeout);
	// one that gets no answer in time is sent again until ctx ends.
	RequestTimeout time.Duration
}

// Scan calls fn for each selected record, in stream order, with an ordered consumer (no state on the
// server survives it). fn must not keep the record after it returns. It stops at the end of the
// stream (unless following), at Until/UntilSeq, when fn fails, or when ctx ends.
func Scan(ctx context.Context, js jetstream.JetStream, o ScanOptions, fn func(*Record) error) error {
	return scan(ctx, js, o, nil, fn)
}

// scan is Scan with each stored message handed to onMsg (when not nil) before its records go to fn
// (when not nil).
func scan(ctx context.Context, js jetstream.JetStream, o ScanOptions, onMsg func(*RawMsg) error, fn func(*Record) error) error {
	if o.Stream == "" {
		o.Stream = bus.StreamAudit
	}
	if o.Batch <= 0 {
		o.Batch = 4096
	}
	var read []string // plus the batches that may hold records under o.Filters (events)
	if len(o.Filters) > 0 {
		read = bus.ReadFilters(o.Filters...)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: read, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case o.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, o.StartSeq
	case !o.Since.IsZero():
		since := o.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := bus.Retry(ctx, o.RequestTimeout, func(ctx context.Context) (jetstream.Consumer, error) {
		return js.OrderedConsumer(ctx, o.Stream, cfg)
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", o.Stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(o.Batch))
	if err != nil {
		return fmt.Errorf("read %s: %w", o.Stream, err)
	}
	defer it.Stop()
	// The end is known only on the stream's leader: the ordered consumer may have landed on a replica
	// that lags, whose count of pending messages says nothing of the newest. The first time the
	// consumer says nothing is pending, the scan takes the leader's last selected message as its end,
	// and ends once it has read that far (at start, from the consumer's position). Waiting for the
	// replica, it asks the leader again when nothing comes for a while, in case that message went
	// meanwhile (a purge, the stream's age limit).
	var pos, target uint64 // the last stream sequence read; the end
	known := false
	waiting := false // the consumer is behind the leader
	// caughtUp is asked when the consumer has nothing pending, and again (refresh) when nothing came
	// while waiting: whether the scan has read to the end; if not, it waits.
	caughtUp := func(refresh bool) (bool, error) {
		if !known || refresh {
			last, err := lastSelected(ctx, js, o, read)
			if err != nil {
				return false, fmt.Errorf("read %s: %w", o.Stream, err)
			}
			target, known = last, true
		}
		waiting = target > pos
		return !waiting, nil
	}
	if !o.Follow {
		info, err := bus.Retry(ctx, o.RequestTimeout, cons.Info)
		if err != nil {
			return fmt.Errorf("read %s: %w", o.Stream, err)
		}
		if info.NumPending == 0 {
			pos = info.Delivered.Stream
			if done, err := caughtUp(false); err != nil || done {
				return err
			}
		}
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var rec Record
	for {
		var opts []jetstream.NextOpt
		if waiting {
			opts = append(opts, jetstream.NextMaxWait(lagWait))
		}
		m, err := it.Next(opts...)
		if waiting && errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			if done, err := caughtUp(true); err != nil || done {
				return err
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s: %w", o.Stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", o.Stream, err)
		}
		if (o.UntilSeq > 0 && md.Sequence.Stream > o.UntilSeq) || (!o.Until.IsZero() && md.Timestamp.After(o.Until)) {
			return nil
		}
		if onMsg != nil {
			raw := RawMsg{Seq: md.Sequence.Stream, Time: md.Timestamp, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
			if err := onMsg(&raw); err != nil {
				return err
			}
		}
		if fn != nil {
			if err := records(m, md, o.Filters, &rec, fn); err != nil {
				return err
			}
		}
		pos, waiting = md.Sequence.Stream, false
		if !o.Follow && md.NumPending == 0 {
			if done, err := caughtUp(false); err != nil || done {
				return err
			}
		}
	}
}

// records calls fn for each record of m that filters select (all, when none), in rec.
func records(m jetstream.Msg, md *jetstream.MsgMetadata, filters []string, rec *Record, fn func(*Record) error) error {
	entries, err := bus.Unbatch(m.Subject(), m.Headers(), m.Data())
	if err != nil {
		// Kept as it was stored: the tools report what does not decode rather than stop.
		entries = []bus.Entry{{Header: m.Headers(), Data: m.Data(), Subject: m.Subject()}}
	}
	for i, e := range entries {
		if len(filters) > 0 && !matchesAny(filters, e.Subject) {
			continue
		}
		*rec = Record{Seq: md.Sequence.Stream, Index: i, Time: md.Timestamp, Subject: e.Subject, Header: e.Header, Data: e.Data}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// lagWait is how long a scan whose consumer is behind the leader waits for a message before it asks
// the leader again.
const lagWait = 2 * time.Second

// lastSelected is the stream leader's last sequence of a message the scan selects (0: none): the
// stream's last one, or the last one of each of the read filters.
func lastSelected(ctx context.Context, js jetstream.JetStream, o ScanOptions, read []string) (uint64, error) {
	st, err := bus.Stream(ctx, js, o.Stream)
	if err != nil {
		return 0, err
	}
	if len(read) == 0 {
		return st.CachedInfo().State.LastSeq, nil
	}
	var last uint64
	for _, f := range read {
		m, err := bus.Retry(ctx, o.RequestTimeout, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
			return st.GetLastMsgForSubject(ctx, f)
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}

// hdrStreamSource is set by JetStream on every sourced message: "<stream> <seq> ...".
const hdrStreamSource = "Nats-Stream-Source"

func matchesAny(filters []string, subject string) bool {
	for _, f := range filters {
		if bus.SubjectMatches(f, subject) {
			return true
		}
	}
	return false
}
