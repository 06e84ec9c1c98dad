// Package auditseal is the audit sealer: it reads the AUDIT stream in order and publishes signed seal
// blocks (audit.Block) to AUDITSEAL, so that `podbus audit verify --chain` can tell whether anyone,
// administrators included, deleted, altered, reordered or truncated the log, or replaced the stream.
//
//	AUDIT (ordered consumer from the last sealed seq + 1)
//	  │ every record: d_i = SHA-256(d_{i-1} || content digest)      (audit.ContentDigest, ChainDigest)
//	  ▼ every BlockRecords records, or BlockInterval after the first of a block
//	AUDITSEAL ◀─ one publish per block, expected last sequence = the last block's: two sealers never
//	             interleave; the loser reloads the last block and goes on from it
//
// The signing key is generated on first start in DataDir (audit.SealKeyFile, mode 0600) with its public
// key beside it (audit.SealPubKeyFile): only the sealer holds it, so whoever can rewrite the log cannot
// re-sign it. The sealer keeps no other state: after a restart it resumes after the last block, so a
// record is sealed once, and none is left unsealed by a crash.
package auditseal

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
)

// Config configures the sealer.
type Config struct {
	ID string // replica identity, written in each block
	// DataDir holds the signing key (created on first start). Ignored when Key is set.
	DataDir string
	Key     ed25519.PrivateKey
	// BlockRecords is the most records per block (default 1024); BlockInterval how long the first
	// record of a block waits for others (default 1s).
	BlockRecords  int
	BlockInterval time.Duration
	Logger        *slog.Logger
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("invalid audit sealer config")

// errReload makes the sealer read its position again from the last block.
var errReload = errors.New("another sealer published a block")

// maxBlockBytes keeps a block well under the server's message size limit.
const maxBlockBytes = 512 << 10

// Sealer seals the audit log.
type Sealer struct {
	cfg   Config
	js    jetstream.JetStream
	key   ed25519.PrivateKey
	log   *slog.Logger
	ready chan struct{}
}

// New makes a sealer, loading (or creating) its key.
func New(cfg Config, conn *bus.Conn) (*Sealer, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("%w: ID is required", ErrConfig)
	}
	if conn == nil || conn.JS == nil {
		return nil, fmt.Errorf("%w: a connection is required", ErrConfig)
	}
	if cfg.BlockRecords <= 0 {
		cfg.BlockRecords = 1024
	}
	if cfg.BlockInterval <= 0 {
		cfg.BlockInterval = time.Second
	}
	key := cfg.Key
	if key == nil {
		if cfg.DataDir == "" {
			return nil, fmt.Errorf("%w: DataDir or Key is required", ErrConfig)
		}
		var err error
		if key, err = audit.LoadOrCreateSealKey(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sealer{cfg: cfg, js: conn.JS, key: key, log: log.With("actor", "auditseal/"+cfg.ID), ready: make(chan struct{})}, nil
}

// PublicKey is the key that verifies the sealer's blocks.
func (s *Sealer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Ready is closed once the sealer has found where to resume.
func (s *Sealer) Ready() <-chan struct{} { return s.ready }

// Run seals until ctx ends. Failures (the server away, a lost race with another sealer) resume from
// the last block.
func (s *Sealer) Run(ctx context.Context) error {
	for {
		err := s.sealUntil(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := time.Second
		if errors.Is(err, errReload) {
			s.log.Info("audit sealer resumes after another's block")
			wait = 10 * time.Millisecond
		} else {
			s.log.Error("audit sealer stopped; resuming from the last block", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// stopGrace is how long Run waits, once ctx has ended, for a seal still reading the log.
const stopGrace = 2 * time.Second

// sealUntil runs seal until it returns, or until stopGrace after ctx's end. Reading the log can be
// inside the client's re-creation of its consumer (after a server left), which retries with back-off
// and does not watch ctx: seal stops its iterator when ctx ends, which ends those retries at their
// next attempt, and the connection's close ends the attempt in flight. Shutdown does not wait for
// either.
func (s *Sealer) sealUntil(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.seal(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	case <-time.After(stopGrace):
		s.log.Warn("audit sealer still reading the log at shutdown; not waiting for it")
		return ctx.Err()
	}
}

// position is where sealing goes on: after the last block.
type position struct {
	sealSeq uint64 // AUDITSEAL's last sequence (the expected one on the next publish)
	prev    audit.Digest
	next    uint64 // AUDIT sequence to seal next (0: the stream's first)
	created time.Time
	have    bool // a block was found
}

// load reads the last block.
func (s *Sealer) load(ctx context.Context) (position, error) {
	var p position
	st, err := s.js.Stream(ctx, bus.StreamAuditSeal)
	if err != nil {
		return p, fmt.Errorf("open %s: %w", bus.StreamAuditSeal, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return p, fmt.Errorf("open %s: %w", bus.StreamAuditSeal, err)
	}
	p.sealSeq = info.State.LastSeq
	if info.State.Msgs == 0 {
		return p, nil
	}
	m, err := st.GetLastMsgForSubject(ctx, bus.SubjAuditSeal)
	if err != nil {
		return p, fmt.Errorf("read the last seal: %w", err)
	}
	if m.Sequence != p.sealSeq {
		return p, errReload
	}
	b, err := audit.DecodeBlock(m.Data)
	if err != nil {
		// Nothing to chain onto: sealing stops rather than fork the chain from a block it cannot read.
		return p, fmt.Errorf("last seal (seq %d): %w", m.Sequence, err)
	}
	if !b.Key.Equal(s.PublicKey()) {
		s.log.Warn("the last seal block was signed with another key; the chain goes on with this one", "sealer", b.Sealer)
	}
	p.prev, p.next, p.created, p.have = b.Head(), b.To()+1, b.StreamCreated, true
	return p, nil
}

// seal runs from the last block until an error or ctx's end.
func (s *Sealer) seal(ctx context.Context) error {
	p, err := s.load(ctx)
	if err != nil {
		return err
	}
	st, err := s.js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		return fmt.Errorf("open %s: %w", bus.StreamAudit, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("open %s: %w", bus.StreamAudit, err)
	}
	first := info.State.FirstSeq
	if info.State.Msgs == 0 {
		first = info.State.LastSeq + 1
	}
	if p.have && !p.created.Equal(info.Created) {
		// The chain goes on over the new stream; verify reports the replacement.
		s.log.Error("the AUDIT stream was re-created since the last seal", "sealed", p.created, "now", info.Created)
		p.next = first
	}
	if p.next == 0 {
		p.next = first
	}
	w := &blockWriter{s: s, p: p, created: info.Created, maxAge: info.Config.MaxAge}
	if p.next < first {
		// Gone (MaxAge) before they were sealed: the next block says so.
		s.log.Error("audit records left the log before they were sealed", "from", p.next, "to", first-1)
		w.skipped, w.p.next = first-p.next, first
	}
	cons, err := s.js.OrderedConsumer(ctx, bus.StreamAudit, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: w.p.next})
	if err != nil {
		return fmt.Errorf("read %s: %w", bus.StreamAudit, err)
	}
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	// One iterator for the whole run: each Fetch of an ordered consumer would create a new consumer on
	// the servers (a meta-layer proposal in a cluster) every BlockInterval.
	it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.BlockRecords))
	if err != nil {
		return fmt.Errorf("read %s: %w", bus.StreamAudit, err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	defer w.closeDue()
	var buf []byte
	for {
		m, err := it.Next(jetstream.NextContext(w.waitContext(ctx)))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if len(w.recs) > 0 && errors.Is(err, context.DeadlineExceeded) {
				if err := w.flush(ctx); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("read %s: %w", bus.StreamAudit, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", bus.StreamAudit, err)
		}
		raw := audit.RawMsg{Seq: md.Sequence.Stream, Time: md.Timestamp, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		if raw.Seq < w.p.next {
			continue // already sealed
		}
		if raw.Seq > w.p.next {
			// Records left the log unsealed (MaxAge, a shrunk MaxMsgs): close the block before them.
			if err := w.flush(ctx); err != nil {
				return err
			}
			s.log.Error("audit records left the log before they were sealed", "from", w.p.next, "to", raw.Seq-1)
			w.skipped, w.p.next = raw.Seq-w.p.next, raw.Seq
		}
		var cd audit.Digest
		cd, buf = audit.ContentDigest(&raw, buf)
		w.add(&raw, cd)
		if len(w.recs) >= s.cfg.BlockRecords || w.bytes >= maxBlockBytes {
			if err := w.flush(ctx); err != nil {
				return err
			}
		}
	}
}

// blockWriter gathers the records of the next block.
type blockWriter struct {
	s       *Sealer
	p       position
	created time.Time
	maxAge  time.Duration
	skipped uint64
	from    uint64
	recs    []audit.SealedRecord
	bytes   int
	started time.Time
	// due ends BlockInterval after the open block's first record (nil: none yet); see waitContext.
	due       context.Context
	cancelDue context.CancelFunc
}

// waitContext is what reading the next record may wait for: ctx, and while a block is open, until it
// is due, so that a block is sealed BlockInterval after its first record whether more come or not.
func (w *blockWriter) waitContext(ctx context.Context) context.Context {
	if len(w.recs) == 0 {
		return ctx
	}
	if w.due == nil {
		w.due, w.cancelDue = context.WithDeadline(ctx, w.started.Add(w.s.cfg.BlockInterval))
	}
	return w.due
}

func (w *blockWriter) closeDue() {
	if w.due != nil {
		w.cancelDue()
		w.due, w.cancelDue = nil, nil
	}
}

func (w *blockWriter) add(m *audit.RawMsg, cd audit.Digest) {
	if len(w.recs) == 0 {
		w.from, w.started = m.Seq, time.Now()
	}
	origin, oseq, _ := m.Origin()
	prev := w.p.prev
	if n := len(w.recs); n > 0 {
		prev = w.recs[n-1].Digest
	}
	w.recs = append(w.recs, audit.SealedRecord{Origin: origin, OriginSeq: oseq, Subject: m.Subject, Digest: audit.ChainDigest(prev, cd)})
	w.bytes += len(m.Subject) + 48
	w.p.next = m.Seq + 1
}

// flush publishes the block gathered, if any.
func (w *blockWriter) flush(ctx context.Context) error {
	if len(w.recs) == 0 {
		return nil
	}
	b := &audit.Block{Stream: bus.StreamAudit, StreamCreated: w.created, MaxAge: w.maxAge, From: w.from, Skipped: w.skipped,
		Prev: w.p.prev, SealedAt: time.Now(), Sealer: w.s.cfg.ID, Records: w.recs}
	b.Sign(w.s.key)
	id := fmt.Sprintf("%d:%d:%d", w.created.UnixNano(), b.From, b.To())
	msg := &nats.Msg{Subject: bus.SubjAuditSeal, Data: b.Encode()}
	var ack *jetstream.PubAck
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		ack, err = w.s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(w.p.sealSeq), jetstream.WithMsgID(id))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return errReload
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(100*(attempt+1)) * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("publish seal block %d..%d: %w", b.From, b.To(), err)
	}
	if ack.Duplicate {
		// Stored by an earlier attempt whose ack was lost: the position is the stream's.
		return errReload
	}
	w.p.sealSeq, w.p.prev = ack.Sequence, b.Head()
	w.skipped, w.recs, w.bytes = 0, nil, 0
	w.closeDue()
	return nil
}
