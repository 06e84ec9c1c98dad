package audit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/podbus/podbus/bus"
)

// Output formats of Replay.
const (
	FormatTable = "table"
	FormatJSON  = "json"
)

// ReplayOptions select and shape a replay.
type ReplayOptions struct {
	ScanOptions
	Format string // FormatTable (default) or FormatJSON: one object per line
	// Pace waits between records as long as they were apart when recorded.
	Pace bool
}

// Replay writes the selected records to w in order and returns how many it wrote.
func Replay(ctx context.Context, js jetstream.JetStream, o ReplayOptions, w io.Writer) (int, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	flushEach := o.Follow || o.Pace
	var (
		buf  []byte
		n    int
		last time.Time
	)
	if o.Format == "" {
		o.Format = FormatTable
	}
	if o.Format != FormatJSON && o.Format != FormatTable {
		return 0, fmt.Errorf("unknown output format %q (want %s or %s)", o.Format, FormatJSON, FormatTable)
	}
	if o.Format == FormatTable {
		_, _ = bw.WriteString("SEQ       TIME                     SUBJECT                          ACTOR                 WHAT\n")
	}
	if !flushEach {
		n, err := replayParallel(ctx, js, o, bw)
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		return n, err
	}
	err := Scan(ctx, js, o.ScanOptions, func(r *Record) error {
		if o.Pace && !last.IsZero() {
			if d := r.Time.Sub(last); d > 0 {
				if err := bw.Flush(); err != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
		}
		last = r.Time
		var err error
		if o.Format == FormatJSON {
			buf, err = AppendJSON(buf[:0], r)
		} else {
			buf = AppendTable(buf[:0], r)
		}
		if err != nil {
			return err
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		n++
		if flushEach {
			return bw.Flush()
		}
		return nil
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}

// replayParallel formats records on every core (decoding and protojson are most of a replay's cost)
// and writes them in order: batches go to workers and, in the same order, to the writer.
func replayParallel(ctx context.Context, js jetstream.JetStream, o ReplayOptions, w io.Writer) (int, error) {
	type batch struct {
		recs []Record
		out  []byte
		err  error
		done chan struct{}
	}
	const size = 256
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	ordered := make(chan *batch, 4*runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				for i := range b.recs {
					if o.Format == FormatJSON {
						if b.out, b.err = AppendJSON(b.out, &b.recs[i]); b.err != nil {
							break
						}
					} else {
						b.out = AppendTable(b.out, &b.recs[i])
					}
				}
				close(b.done)
			}
		}()
	}
	n := 0
	var werr error
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for b := range ordered {
			<-b.done
			if werr != nil {
				continue
			}
			if b.err != nil {
				werr = b.err
				cancel()
				continue
			}
			if _, err := w.Write(b.out); err != nil {
				werr = err
				cancel()
				continue
			}
			n += len(b.recs)
		}
	}()
	cur := &batch{done: make(chan struct{})}
	send := func() {
		ordered <- cur
		work <- cur
		cur = &batch{done: make(chan struct{})}
	}
	err := Scan(ctx, js, o.ScanOptions, func(r *Record) error {
		cur.recs = append(cur.recs, *r)
		if len(cur.recs) == size {
			send()
		}
		return nil
	})
	if len(cur.recs) > 0 {
		send()
	}
	close(work)
	close(ordered)
	wg.Wait()
	<-writerDone
	if werr != nil {
		return n, werr
	}
	return n, err
}

var jsonOpts = protojson.MarshalOptions{UseProtoNames: false}

// AppendJSON appends r as one JSON object and a newline: seq, time, subject, origin stream and
// sequence, actor, user, correlation, uid, key, op (DEL/PURGE on bucket deletes) and the decoded payload
// as "data" (or the raw bytes as "raw" when the subject carries no protobuf or it does not decode).
func AppendJSON(b []byte, r *Record) ([]byte, error) {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	if r.Index > 0 {
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(r.Index), 10)
	}
	b = append(b, `,"time":"`...)
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","subject":`...)
	b = appendString(b, r.Subject)
	if stream, seq, ok := r.Origin(); ok {
		b = append(b, `,"stream":`...)
		b = appendString(b, stream)
		b = append(b, `,"stream_seq":`...)
		b = strconv.AppendUint(b, seq, 10)
	}
	for _, h := range [...]struct{ name, hdr string }{
		{"actor", bus.HdrActor}, {"user", bus.HdrUser}, {"correlation", bus.HdrCorrelation},
		{"uid", bus.HdrPodUID}, {"key", bus.HdrKey}, {"op", bus.HdrKVOperation},
	} {
		if v := r.Header.Get(h.hdr); v != "" {
			b = append(b, `,"`...)
			b = append(b, h.name...)
			b = append(b, `":`...)
			b = appendString(b, v)
		}
	}
	m, _ := r.Decode() // a payload that does not decode is printed raw
	switch {
	case m != nil:
		var err error
		b = append(b, `,"data":`...)
		b, err = appendProtoJSON(b, m)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", r.Seq, err)
		}
	case len(r.Data) > 0:
		b = append(b, `,"raw":`...)
		b = appendString(b, string(r.Data))
	}
	return append(b, "}\n"...), nil
}

// AppendTable appends r as one line of the readable table.
func AppendTable(b []byte, r *Record) []byte {
	b = fmt.Appendf(b, "%-9d %-24s %-32s %-21s %s\n", r.Seq, r.Time.UTC().Format("2006-01-02T15:04:05.000Z"),
		r.Subject, r.Actor(), Describe(r))
	return b
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			b = append(b, c)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\t':
				b = append(b, '\\', 't')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
