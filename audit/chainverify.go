package audit

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
)

// Kinds of Finding.
const (
	FindDeleted   = "deleted"   // a sealed record is missing from the log
	FindAltered   = "altered"   // a record differs from what was sealed at its place
	FindReordered = "reordered" // a sealed record is at another place, or an origin's sequences go back
	FindTruncated = "truncated" // the log ends before its seals, or before its origin streams
	FindReplaced  = "replaced"  // the stream is not the one sealed (created at another time)
	FindGap       = "gap"       // an origin stream's sequences skip some
	FindBadSeal   = "bad seal"  // a seal block that does not verify, is untrusted, or breaks the seal chain
)

// Finding is one thing VerifyChain found wrong, at the first record it concerns.
type Finding struct {
	Kind      string
	Seq       uint64 // in the audit stream (0: past its end)
	Origin    string // the record's origin stream and sequence there, as sealed when it was
	OriginSeq uint64
	Subject   string
	Detail    string
}

func (f Finding) String() string {
	where := "past the end"
	if f.Seq > 0 {
		where = fmt.Sprintf("seq %d", f.Seq)
	}
	s := fmt.Sprintf("%s: audit %s", f.Kind, where)
	if f.Origin != "" {
		s += fmt.Sprintf(" (%s %d", f.Origin, f.OriginSeq)
		if f.Subject != "" {
			s += " " + f.Subject
		}
		s += ")"
	}
	if f.Detail != "" {
		s += ": " + f.Detail
	}
	return s
}

// ChainOptions shape VerifyChain.
type ChainOptions struct {
	Stream     string // default bus.StreamAudit
	SealStream string // default bus.StreamAuditSeal
	// PublicKeys are the sealer keys to trust. None: the key of the first block is taken (and
	// ChainResult.KeyTrusted is false): that proves the chain consistent, not who sealed it.
	PublicKeys []ed25519.PublicKey
	// Settle is how long an origin stream may be ahead of the log before it is reported as a truncated
	// tail (default 3s): sourcing trails the origins a little.
	Settle time.Duration
	// Now is the clock (default time.Now), for seals past the stream's MaxAge.
	Now func() time.Time

	// readBack, in tests, changes what was read before it is checked.
	readBack func(msgs []RawMsg, digests []Digest)
}

// ChainResult says what VerifyChain checked and found.
type ChainResult struct {
	Records    int // read from the log
	Sealed     int // of them, checked against a seal
	Unsealed   int // after the last seal (not yet sealed)
	Expired    int // sealed, and gone from the head of the log by its MaxAge
	Blocks     int
	KeyTrusted bool
	// Findings, the first bad record first.
	Findings []Finding
}

// First is the first finding (nil when there is none).
func (r *ChainResult) First() *Finding {
	if len(r.Findings) == 0 {
		return nil
	}
	return &r.Findings[0]
}

const maxFindings = 100

// VerifyChain walks the audit log and its seal blocks together: every record's chained digest must be
// the one sealed for its sequence, each block signed by a trusted key and chained onto the one before,
// the stream the one sealed (same creation time), every origin stream's sequences contiguous, and the
// log as long as its seals and its origin streams. It returns ErrChainBroken when anything is wrong,
// with the findings in the result.
func VerifyChain(ctx context.Context, js jetstream.JetStream, o ChainOptions) (ChainResult, error) {
	o.defaults()
	ch, err := newChecker(ctx, js, o)
	if err != nil {
		return ChainResult{}, err
	}
	deadline := time.Now().Add(o.Settle)
	next := uint64(0)
	for {
		last, err := walkChain(ctx, js, ScanOptions{Stream: o.Stream, StartSeq: next}, nil, func(b *chainBatch) error {
			if o.readBack != nil {
				o.readBack(b.msgs, b.digests)
			}
			for i := range b.msgs {
				if err := ch.add(ctx, &b.msgs[i], b.digests[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return ch.res, err
		}
		if last > 0 {
			next = last + 1
		}
		if ch.stopped {
			break
		}
		behind, err := ch.originsAhead(ctx)
		if err != nil {
			return ch.res, err
		}
		if len(behind) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ch.res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := ch.finish(ctx); err != nil {
		return ch.res, err
	}
	return ch.result()
}

func (o *ChainOptions) defaults() {
	if o.Stream == "" {
		o.Stream = bus.StreamAudit
	}
	if o.SealStream == "" {
		o.SealStream = bus.StreamAuditSeal
	}
	if o.Settle <= 0 {
		o.Settle = 3 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// checker compares the log, message by message in order, with the seals.
type checker struct {
	o       ChainOptions
	js      jetstream.JetStream
	seals   *sealReader
	created time.Time // of the stream read
	copyOf  bool      // the stream read is not the one sealed (a copy): its identity is not compared
	res     ChainResult

	blk      *Block // the block covering next, nil past the seals
	lastBlk  *Block
	d        Digest // chained digest of the record before next
	next     uint64 // the sequence expected next (0: not yet known)
	replaced map[int64]bool
	origins  map[string]uint64 // origin stream -> last sequence seen
	sources  []string          // the stream's configured sources
	pending  *Finding          // a displaced record, reordered if it shows up later
	wanted   SealedRecord      // what pending misses
	stopped  bool              // the rest cannot be compared (errStop)
	// noOrigins leaves the origin streams out (a replay: they may be a moment ahead of the log).
	noOrigins bool
}

func newChecker(ctx context.Context, js jetstream.JetStream, o ChainOptions) (*checker, error) {
	s, err := bus.Stream(ctx, js, o.Stream)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", o.Stream, err)
	}
	info := s.CachedInfo()
	seals, err := newSealReader(ctx, js, o.SealStream, o.PublicKeys)
	if err != nil {
		return nil, err
	}
	var sources []string
	for _, src := range info.Config.Sources {
		sources = append(sources, src.Name)
	}
	return &checker{o: o, js: js, seals: seals, created: info.Created, replaced: map[int64]bool{}, sources: sources,
		origins: map[string]uint64{}, res: ChainResult{KeyTrusted: len(o.PublicKeys) > 0}}, nil
}

func (c *checker) find(f Finding) {
	if len(c.res.Findings) < maxFindings {
		c.res.Findings = append(c.res.Findings, f)
	}
}

// block returns the block covering seq, reading the seals up to it; nil when none does (yet).
func (c *checker) block(ctx context.Context, seq uint64) (*Block, error) {
	for c.blk == nil || seq > c.blk.To() {
		b, f, err := c.seals.next(ctx)
		if err != nil {
			return nil, err
		}
		if f != nil {
			c.find(*f)
		}
		if b == nil {
			c.blk = nil
			return nil, nil
		}
		c.res.Blocks++
		if !c.copyOf && c.blk == nil && c.lastBlk == nil && b.Stream != c.o.Stream {
			c.copyOf = true
		}
		if !c.copyOf && !b.StreamCreated.Equal(c.created) && !c.replaced[b.StreamCreated.UnixNano()] {
			c.replaced[b.StreamCreated.UnixNano()] = true
			f := Finding{Kind: FindReplaced, Seq: b.From, Detail: fmt.Sprintf("%s was created at %s, the seals from seq %d are of a stream created at %s",
				c.o.Stream, c.created.UTC().Format(time.RFC3339Nano), b.From, b.StreamCreated.UTC().Format(time.RFC3339Nano))}
			if len(b.Records) > 0 {
				f.Origin, f.OriginSeq, f.Subject = b.Records[0].Origin, b.Records[0].OriginSeq, b.Records[0].Subject
			}
			c.find(f)
		}
		if c.lastBlk != nil && b.From <= c.lastBlk.To() {
			// The sealer started over on a new stream: the records sealed before are not in this one.
			c.find(Finding{Kind: FindReplaced, Seq: b.From, Detail: fmt.Sprintf("the seals start over at seq %d after sealing up to %d (the stream was re-created)", b.From, c.lastBlk.To())})
			c.stopped = true
			return nil, errStop
		}
		if c.lastBlk == nil && c.next == 0 {
			c.d = b.Prev
		}
		if c.lastBlk == nil && b.Prev != (Digest{}) && b.MaxAge == 0 {
			// The log is kept forever and so are its seals: the first one left chains onto one that is gone.
			f := Finding{Kind: FindBadSeal, Seq: b.From, Detail: fmt.Sprintf("the first seal block follows blocks that are gone from %s: the records before are not verified", c.o.SealStream)}
			if len(b.Records) > 0 {
				f.Origin, f.OriginSeq, f.Subject = b.Records[0].Origin, b.Records[0].OriginSeq, b.Records[0].Subject
			}
			c.find(f)
		}
		c.lastBlk, c.blk = b, b
	}
	if seq < c.blk.From {
		return nil, nil
	}
	return c.blk, nil
}

// errStop ends the walk early: what follows cannot be compared.
var errStop = errors.New("stop")

// sealed returns the sealed record for seq (ok false when no seal covers it).
func (c *checker) sealed(ctx context.Context, seq uint64) (SealedRecord, bool, error) {
	b, err := c.block(ctx, seq)
	if err != nil || b == nil {
		return SealedRecord{}, false, err
	}
	return b.Records[seq-b.From], true, nil
}

// add checks the next message of the log, whose content digest is cd.
func (c *checker) add(ctx context.Context, m *RawMsg, cd Digest) error {
	if c.stopped {
		return errStop
	}
	return c.addMsg(ctx, m, cd)
}

func (c *checker) addMsg(ctx context.Context, m *RawMsg, cd Digest) error {
	c.res.Records++
	if c.next == 0 {
		// The first record read: sealed records before it are gone from the head of the log.
		if _, err := c.block(ctx, 0); err != nil {
			return err
		}
		if c.blk != nil {
			c.next = c.blk.From
		} else {
			c.next = m.Seq
		}
	}
	if m.Seq > c.next {
		if err := c.missing(ctx, c.next, m.Seq-1, false); err != nil {
			return err
		}
	}
	c.next = m.Seq + 1
	origin, oseq, _ := m.Origin()
	// The seals' verdict on this record first, then its origin's sequence.
	defer c.checkOrigin(m, origin, oseq)
	if c.pending != nil && c.wanted.Origin == origin && c.wanted.OriginSeq == oseq && origin != "" {
		c.pending.Kind = FindReordered
		c.pending.Detail = fmt.Sprintf("it is at seq %d; %s", m.Seq, c.pending.Detail)
		c.pending = nil
	}
	want, ok, err := c.sealed(ctx, m.Seq)
	if err != nil {
		return err
	}
	if ok && c.res.Sealed == 0 && m.Seq == c.blk.From {
		// Records read before the first seal (a sealer started on an older log) do not chain into it.
		c.d = c.blk.Prev
	}
	got := ChainDigest(c.d, cd)
	if !ok {
		c.res.Unsealed++
		c.d = got
		return nil
	}
	c.res.Sealed++
	c.d = want.Digest
	if got == want.Digest {
		return nil
	}
	f := Finding{Kind: FindAltered, Seq: m.Seq, Origin: want.Origin, OriginSeq: want.OriginSeq, Subject: want.Subject}
	switch {
	case origin != want.Origin || oseq != want.OriginSeq:
		f.Detail = fmt.Sprintf("it holds %s %d %s instead", origin, oseq, m.Subject)
		// Displaced, not altered, when the sealed record shows up later or this one was sealed elsewhere.
		if at, found := c.sealedAt(origin, oseq); found {
			f.Kind = FindReordered
			f.Detail += fmt.Sprintf(", sealed at seq %d", at)
		}
	case m.Subject != want.Subject:
		f.Detail = fmt.Sprintf("its subject is %s", m.Subject)
	default:
		f.Detail = "its headers, body or time differ from what was sealed"
	}
	c.find(f)
	if f.Kind == FindAltered && (origin != want.Origin || oseq != want.OriginSeq) && len(c.res.Findings) <= maxFindings {
		c.pending, c.wanted = &c.res.Findings[len(c.res.Findings)-1], want
	}
	return nil
}

// sealedAt finds the sequence the current block sealed origin/oseq at.
func (c *checker) sealedAt(origin string, oseq uint64) (uint64, bool) {
	if c.blk == nil {
		return 0, false
	}
	for i, r := range c.blk.Records {
		if r.Origin == origin && r.OriginSeq == oseq {
			return c.blk.From + uint64(i), true
		}
	}
	return 0, false
}

// missing reports sealed records from..to absent from the log (one finding for the run) and moves the
// chain over them. atEnd: the log ends before them.
func (c *checker) missing(ctx context.Context, from, to uint64, atEnd bool) error {
	var first *Finding
	n := uint64(0)
	for seq := from; seq <= to; seq++ {
		b, err := c.block(ctx, seq)
		if err != nil {
			return err
		}
		if b == nil {
			break // past the seals: nothing is known of these
		}
		r := b.Records[seq-b.From]
		c.d = r.Digest
		if first == nil && !atEnd && c.res.Records <= 1 && c.expired(b) {
			c.res.Expired++
			continue
		}
		n++
		if first == nil {
			kind := FindDeleted
			if atEnd {
				kind = FindTruncated
			}
			first = &Finding{Kind: kind, Seq: seq, Origin: r.Origin, OriginSeq: r.OriginSeq, Subject: r.Subject}
		}
	}
	if first != nil {
		if atEnd {
			first.Detail = fmt.Sprintf("the log ends at seq %d; %d sealed records follow", from-1, n)
		} else {
			first.Detail = fmt.Sprintf("%d sealed records missing (seq %d..%d)", n, first.Seq, to)
		}
		c.find(*first)
	}
	return nil
}

// expired says the block's records may have left the head of the log by its MaxAge.
func (c *checker) expired(b *Block) bool {
	return b.MaxAge > 0 && c.o.Now().Sub(b.SealedAt) > b.MaxAge
}

// checkOrigin checks that each origin stream's sequences follow each other.
func (c *checker) checkOrigin(m *RawMsg, origin string, oseq uint64) {
	if origin == "" {
		return
	}
	last, seen := c.origins[origin]
	c.origins[origin] = max(last, oseq)
	switch {
	case !seen:
	case oseq <= last:
		c.find(Finding{Kind: FindReordered, Seq: m.Seq, Origin: origin, OriginSeq: oseq, Subject: m.Subject,
			Detail: fmt.Sprintf("%s %d comes after %s %d", origin, oseq, origin, last)})
	case oseq > last+1:
		c.find(Finding{Kind: FindGap, Seq: m.Seq, Origin: origin, OriginSeq: oseq, Subject: m.Subject,
			Detail: fmt.Sprintf("%s %d..%d are not in the log", origin, last+1, oseq-1)})
	}
}

// originsAhead lists the origin streams holding sequences past the last the log has of them.
func (c *checker) originsAhead(ctx context.Context) ([]Finding, error) {
	var out []Finding
	names := slices.Clone(c.sources)
	for name := range c.origins {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		s, err := bus.Stream(ctx, c.js, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		info := s.CachedInfo()
		last := c.origins[name]
		if info.State.LastSeq <= last || info.State.Msgs == 0 {
			continue
		}
		first := max(last+1, info.State.FirstSeq)
		f := Finding{Kind: FindTruncated, Origin: name, OriginSeq: first,
			Detail: fmt.Sprintf("%s holds up to seq %d, the log only up to %d", name, info.State.LastSeq, last)}
		if last == 0 {
			f.Detail = fmt.Sprintf("%s holds seq %d..%d, the log none of them", name, info.State.FirstSeq, info.State.LastSeq)
		}
		if m, err := bus.Retry(ctx, 0, func(ctx context.Context) (*jetstream.RawStreamMsg, error) { return s.GetMsg(ctx, first) }); err == nil {
			f.Subject = m.Subject
		}
		out = append(out, f)
	}
	return out, nil
}

// finish reports what follows the last record: sealed records the log lacks, origins ahead of it.
func (c *checker) finish(ctx context.Context) error {
	c.pending = nil
	if c.stopped {
		return nil
	}
	if c.next == 0 {
		// An empty log: every sealed record is missing.
		if _, err := c.block(ctx, 0); err != nil && !errors.Is(err, errStop) {
			return err
		}
		if c.blk != nil {
			c.next = c.blk.From
		}
	}
	if c.next > 0 {
		for {
			b, err := c.block(ctx, c.next)
			if errors.Is(err, errStop) {
				break
			}
			if err != nil {
				return err
			}
			if b == nil {
				break
			}
			if err := c.missing(ctx, c.next, b.To(), true); errors.Is(err, errStop) {
				break
			} else if err != nil {
				return err
			}
			c.next = b.To() + 1
		}
	}
	if c.stopped {
		return nil
	}
	if !c.noOrigins {
		ahead, err := c.originsAhead(ctx)
		if err != nil {
			return err
		}
		for _, f := range ahead {
			c.find(f)
		}
	}
	if c.res.Records > 0 && c.res.Blocks == 0 {
		c.find(Finding{Kind: FindBadSeal, Detail: fmt.Sprintf("no seal in %s: is the audit sealer running?", c.o.SealStream)})
	}
	return nil
}

func (c *checker) result() (ChainResult, error) {
	// Records first, in log order (past the end last); then what concerns the stream or its seals.
	rank := func(f Finding) (int, uint64) {
		if f.Kind == FindReplaced || f.Kind == FindBadSeal {
			return 1, f.Seq - 1
		}
		return 0, f.Seq - 1
	}
	slices.SortStableFunc(c.res.Findings, func(a, b Finding) int {
		ar, as := rank(a)
		br, bs := rank(b)
		if ar != br {
			return ar - br
		}
		return cmp.Compare(as, bs)
	})
	switch n := len(c.res.Findings); n {
	case 0:
		return c.res, nil
	case 1:
		return c.res, fmt.Errorf("%w: %s", ErrChainBroken, c.res.Findings[0])
	default:
		return c.res, fmt.Errorf("%w: %s (and %d more findings)", ErrChainBroken, c.res.Findings[0], n-1)
	}
}

// sealReader reads the seal blocks in order, checking each one's signature, key and link to the one
// before.
type sealReader struct {
	s       jetstream.Stream
	keys    []ed25519.PublicKey
	seq     uint64 // next to read
	last    uint64
	prev    *Block
	trusted bool
	polled  time.Time // when the stream's last sequence was last read
}

func newSealReader(ctx context.Context, js jetstream.JetStream, name string, keys []ed25519.PublicKey) (*sealReader, error) {
	s, err := bus.Stream(ctx, js, name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return &sealReader{s: s, keys: keys, trusted: len(keys) > 0}, nil
}

// next returns the next good block (nil at the end), and a finding about any it had to pass over.
func (r *sealReader) next(ctx context.Context) (*Block, *Finding, error) {
	var bad *Finding
	for {
		if r.seq == 0 || r.seq > r.last {
			if r.seq != 0 && time.Since(r.polled) < 100*time.Millisecond {
				// Past the last block: the records after it are asking; ask the server now and then.
				return nil, bad, nil
			}
			r.polled = time.Now()
			info, err := bus.Retry(ctx, 0, func(ctx context.Context) (*jetstream.StreamInfo, error) { return r.s.Info(ctx) })
			if err != nil {
				return nil, nil, fmt.Errorf("read seals: %w", err)
			}
			if r.seq == 0 {
				r.seq = info.State.FirstSeq
			}
			r.last = info.State.LastSeq
			if info.State.Msgs == 0 || r.seq > r.last {
				return nil, bad, nil
			}
		}
		m, err := bus.Retry(ctx, 0, func(ctx context.Context) (*jetstream.RawStreamMsg, error) { return r.s.GetMsg(ctx, r.seq) })
		r.seq++
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read seals: %w", err)
		}
		b, err := DecodeBlock(m.Data)
		if err == nil {
			err = r.trust(b)
		}
		if err == nil && r.prev != nil && b.StreamCreated.Equal(r.prev.StreamCreated) &&
			(b.Prev != r.prev.Head() || b.From != r.prev.To()+1+b.Skipped) {
			err = fmt.Errorf("block at seal seq %d does not follow the one before (from %d, after %d)", m.Sequence, b.From, r.prev.To())
		}
		if err != nil {
			if bad == nil {
				bad = &Finding{Kind: FindBadSeal, Detail: fmt.Sprintf("seal seq %d: %v", m.Sequence, err)}
				if b != nil {
					bad.Seq = b.From
				}
			}
			continue
		}
		if b.Skipped > 0 && bad == nil {
			bad = &Finding{Kind: FindDeleted, Seq: b.From - b.Skipped, Detail: fmt.Sprintf("%d records were gone from the log before they were sealed", b.Skipped)}
		}
		r.prev = b
		return b, bad, nil
	}
}

func (r *sealReader) trust(b *Block) error {
	if !r.trusted {
		// Trust on first use: the rest must be signed by the same key.
		r.keys, r.trusted = []ed25519.PublicKey{b.Key}, true
	}
	if slices.ContainsFunc(r.keys, func(k ed25519.PublicKey) bool { return bytes.Equal(k, b.Key) }) {
		return nil
	}
	return ErrUntrustedKey
}

// chainBatch is a run of consecutive log messages with their content digests, and the records they
// hold when a replay asks for them.
type chainBatch struct {
	msgs    []RawMsg
	digests []Digest
	n       int // records formatted
	out     []byte
	err     error
	done    chan struct{}
}

// walkChain reads the log from o.StartSeq (no filters: the chain covers every message) and hands
// batches to fn in order, their content digests computed on every core. work, when not nil, runs on
// the workers after the digests (a replay formats there). It returns the last sequence read.
func walkChain(ctx context.Context, js jetstream.JetStream, o ScanOptions, work func(*chainBatch), fn func(*chainBatch) error) (uint64, error) {
	const size = 256
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	procs := runtime.GOMAXPROCS(0)
	todo := make(chan *chainBatch, 2*procs)
	ordered := make(chan *chainBatch, 4*procs)
	var wg sync.WaitGroup
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for b := range todo {
				b.digests = make([]Digest, len(b.msgs))
				for i := range b.msgs {
					b.digests[i], buf = ContentDigest(&b.msgs[i], buf)
				}
				if work != nil {
					work(b)
				}
				close(b.done)
			}
		}()
	}
	var ferr error
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for b := range ordered {
			<-b.done
			if ferr != nil {
				continue
			}
			if ferr = fn(b); ferr != nil {
				cancel()
			}
		}
	}()
	cur := &chainBatch{done: make(chan struct{})}
	send := func() {
		ordered <- cur
		todo <- cur
		cur = &chainBatch{done: make(chan struct{})}
	}
	var last uint64
	err := scan(ctx, js, o, func(m *RawMsg) error {
		cur.msgs = append(cur.msgs, *m)
		last = m.Seq
		if len(cur.msgs) == size {
			send()
		}
		return nil
	}, nil)
	if len(cur.msgs) > 0 {
		send()
	}
	close(todo)
	close(ordered)
	wg.Wait()
	<-consumed
	if errors.Is(ferr, errStop) {
		return last, nil
	}
	if ferr != nil {
		return last, ferr
	}
	return last, err
}

// ReplayVerified is Replay with the chain verified on the way: every record written was checked
// against its seal first (those after the last seal are written too, and counted as unsealed). It
// reads the whole log from its start in order (ReplayOptions may set Stream, Until, UntilSeq and the
// format; not filters, a start, Follow or Pace) and stops before the run of records holding the first
// bad one, with ErrChainBroken. Unlike VerifyChain it does not compare the log with its origin streams.
func ReplayVerified(ctx context.Context, js jetstream.JetStream, o ReplayOptions, co ChainOptions, w io.Writer) (int, ChainResult, error) {
	if len(o.Filters) > 0 || o.StartSeq > 0 || !o.Since.IsZero() || o.Follow || o.Pace {
		return 0, ChainResult{}, fmt.Errorf("%w: a verified replay reads the whole log in order (no subjects, start, follow or pace)", ErrChainOptions)
	}
	if o.Format == "" {
		o.Format = FormatTable
	}
	if o.Format != FormatJSON && o.Format != FormatTable {
		return 0, ChainResult{}, fmt.Errorf("unknown output format %q (want %s or %s)", o.Format, FormatJSON, FormatTable)
	}
	if o.Stream != "" {
		co.Stream = o.Stream
	}
	co.defaults()
	ch, err := newChecker(ctx, js, co)
	if err != nil {
		return 0, ChainResult{}, err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	if o.Format == FormatTable {
		_, _ = bw.WriteString("SEQ       TIME                     SUBJECT                          ACTOR                 WHAT\n")
	}
	format := func(b *chainBatch) {
		var rec Record
		for i := range b.msgs {
			m := &b.msgs[i]
			entries, err := bus.Unbatch(m.Subject, m.Header, m.Data)
			if err != nil {
				entries = []bus.Entry{{Header: m.Header, Data: m.Data, Subject: m.Subject}}
			}
			for j, e := range entries {
				rec = Record{Seq: m.Seq, Index: j, Time: m.Time, Subject: e.Subject, Header: e.Header, Data: e.Data}
				if o.Format == FormatJSON {
					if b.out, b.err = AppendJSON(b.out, &rec); b.err != nil {
						return
					}
				} else {
					b.out = AppendTable(b.out, &rec)
				}
				b.n++
			}
		}
	}
	n := 0
	_, err = walkChain(ctx, js, o.ScanOptions, format, func(b *chainBatch) error {
		for i := range b.msgs {
			if err := ch.add(ctx, &b.msgs[i], b.digests[i]); err != nil {
				return err
			}
		}
		if len(ch.res.Findings) > 0 {
			return errStop
		}
		if b.err != nil {
			return b.err
		}
		if _, err := bw.Write(b.out); err != nil {
			return err
		}
		n += b.n
		return nil
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return n, ch.res, err
	}
	if len(ch.res.Findings) == 0 && o.Until.IsZero() && o.UntilSeq == 0 {
		// Read to the end: sealed records past it are missing.
		ch.noOrigins = true
		if err := ch.finish(ctx); err != nil {
			return n, ch.res, err
		}
	}
	res, err := ch.result()
	return n, res, err
}

// ErrChainOptions is returned for options a verified replay cannot honour.
var ErrChainOptions = errors.New("not possible with the chain verified")
