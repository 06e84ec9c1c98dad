// Package podstream carries the streams of kubectl exec, attach and port-forward between the API and a
// node agent over core NATS. The API opens a session with a request on bus.SubjStreamOpen(node); then each
// side publishes frames to the other's subject of the session (bus.SubjStreamIn, bus.SubjStreamOut).
//
// A frame is [type][channel][seq uint32][payload]. Core NATS keeps one publisher's messages in order but may
// drop them (a slow consumer, a reconnect): every frame carries the sender's sequence number and a gap
// ends the session rather than corrupt the stream. Data is flow-controlled by a window of unacknowledged
// bytes per direction: the receiver acknowledges what its readers consumed. Both sides ping; a session
// that hears nothing for deadAfter ends.
package podstream

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Errors a session ends with.
var (
	// ErrGap: a frame was lost on the way (NATS dropped it); the stream cannot continue.
	ErrGap = errors.New("stream frame lost")
	// ErrPeerGone: the other side aborted the session or stopped answering.
	ErrPeerGone = errors.New("stream peer gone")
	// ErrClosed: the session was closed locally.
	ErrClosed = errors.New("stream closed")
)

// Channels of a session, numbered as the remotecommand protocol numbers them.
const (
	ChanStdin  byte = 0 // also a port-forward's data, both ways
	ChanStdout byte = 1
	ChanStderr byte = 2
)

const (
	tData byte = iota + 1
	tEOF
	tAck
	tResize
	tExit
	tAbort
	tPing
)

const (
	headerLen = 6
	chunk     = 32 << 10
	window    = 512 << 10
	pingEvery = 5 * time.Second
	deadAfter = 30 * time.Second
)

// TermSize is a terminal's size in characters.
type TermSize struct{ Width, Height uint16 }

// Exit ends a session: the command's exit code, or why it could not run.
type Exit struct {
	Code  int    `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// mux is one side of a session.
type mux struct {
	nc  *nats.Conn
	pub string
	sub *nats.Subscription

	pubMu  sync.Mutex
	seqOut uint32

	mu       sync.Mutex
	cond     *sync.Cond
	seqIn    uint32
	bufs     [3][]byte
	eof      [3]bool
	sent     int64 // data bytes published
	acked    int64 // of them, consumed by the peer
	consumed int64 // data bytes read locally
	ackSent  int64
	lastRecv time.Time
	exit     *Exit
	err      error

	resize chan TermSize
	done   chan struct{}
}

// newMux subscribes to in and publishes to pub; it lives until Close or ctx ends.
func newMux(ctx context.Context, nc *nats.Conn, in, pub string) (*mux, error) {
	m := &mux{nc: nc, pub: pub, lastRecv: time.Now(), resize: make(chan TermSize, 8), done: make(chan struct{})}
	m.cond = sync.NewCond(&m.mu)
	sub, err := nc.Subscribe(in, m.receive)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", in, err)
	}
	// A slow reader is paced by the window; these limits only guard against a peer that ignores it.
	_ = sub.SetPendingLimits(4096, 4*window)
	m.sub = sub
	go m.keepAlive(ctx)
	return m, nil
}

func (m *mux) keepAlive(ctx context.Context) {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case <-ctx.Done():
			m.abort(ctx.Err())
			return
		case <-t.C:
			m.mu.Lock()
			quiet := time.Since(m.lastRecv)
			m.mu.Unlock()
			if quiet > deadAfter {
				m.fail(fmt.Errorf("%w: silent for %s", ErrPeerGone, quiet.Round(time.Second)))
				return
			}
			_ = m.send(tPing, 0, nil)
		}
	}
}

func (m *mux) send(typ, ch byte, payload []byte) error {
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	m.seqOut++
	b := make([]byte, headerLen+len(payload))
	b[0], b[1] = typ, ch
	binary.BigEndian.PutUint32(b[2:], m.seqOut)
	copy(b[headerLen:], payload)
	if err := m.nc.Publish(m.pub, b); err != nil {
		m.fail(fmt.Errorf("publish %s: %w", m.pub, err))
		return err
	}
	return nil
}

// receive handles one frame; NATS calls it in order for the subscription.
func (m *mux) receive(msg *nats.Msg) {
	b := msg.Data
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return
	}
	if len(b) < headerLen {
		m.failLocked(fmt.Errorf("%w: short frame", ErrGap))
		return
	}
	typ, ch, seq, payload := b[0], b[1], binary.BigEndian.Uint32(b[2:]), b[headerLen:]
	if seq != m.seqIn+1 {
		m.failLocked(fmt.Errorf("%w: got frame %d after %d", ErrGap, seq, m.seqIn))
		return
	}
	m.seqIn = seq
	m.lastRecv = time.Now()
	switch typ {
	case tData:
		if int(ch) < len(m.bufs) && !m.eof[ch] {
			m.bufs[ch] = append(m.bufs[ch], payload...)
		}
	case tEOF:
		if int(ch) < len(m.eof) {
			m.eof[ch] = true
		}
	case tAck:
		if len(payload) == 8 {
			m.acked = int64(binary.BigEndian.Uint64(payload))
		}
	case tResize:
		if len(payload) == 4 {
			select {
			case m.resize <- TermSize{Width: binary.BigEndian.Uint16(payload), Height: binary.BigEndian.Uint16(payload[2:])}:
			default: // a newer size follows; an old one may go
			}
		}
	case tExit:
		var e Exit
		if err := json.Unmarshal(payload, &e); err != nil {
			e = Exit{Error: "malformed exit frame: " + err.Error()}
		}
		m.exit = &e
	case tAbort:
		m.failLocked(fmt.Errorf("%w: %s", ErrPeerGone, payload))
		return
	}
	m.cond.Broadcast()
}

func (m *mux) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failLocked(err)
}

func (m *mux) failLocked(err error) {
	if m.err != nil {
		return
	}
	m.err = err
	close(m.done)
	m.cond.Broadcast()
}

// abort tells the peer the session is over and ends it here.
func (m *mux) abort(cause error) {
	m.mu.Lock()
	over := m.err != nil
	m.mu.Unlock()
	if !over {
		_ = m.send(tAbort, 0, []byte(cause.Error()))
	}
	m.fail(cause)
}

// Close ends the session locally; a peer still sending is told by the abort.
func (m *mux) Close() {
	m.abort(ErrClosed)
	_ = m.sub.Unsubscribe()
}

// write sends p on ch, waiting while the peer has a full window unconsumed.
func (m *mux) write(ch byte, p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(len(p), chunk)
		m.mu.Lock()
		for m.err == nil && m.sent-m.acked+int64(c) > window {
			m.cond.Wait()
		}
		if err := m.err; err != nil {
			m.mu.Unlock()
			return n, err
		}
		m.sent += int64(c)
		m.mu.Unlock()
		if err := m.send(tData, ch, p[:c]); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

// read reads what arrived on ch; io.EOF once the peer closed ch and all was read.
func (m *mux) read(ch byte, p []byte) (int, error) {
	m.mu.Lock()
	for len(m.bufs[ch]) == 0 && !m.eof[ch] && m.err == nil {
		m.cond.Wait()
	}
	if len(m.bufs[ch]) == 0 {
		defer m.mu.Unlock()
		if m.eof[ch] {
			return 0, io.EOF
		}
		return 0, m.err
	}
	n := copy(p, m.bufs[ch])
	m.bufs[ch] = m.bufs[ch][n:]
	m.consumed += int64(n)
	var ack []byte
	if m.consumed-m.ackSent >= window/4 || len(m.bufs[ch]) == 0 && m.consumed > m.ackSent {
		m.ackSent = m.consumed
		ack = binary.BigEndian.AppendUint64(nil, uint64(m.consumed))
	}
	m.mu.Unlock()
	if ack != nil {
		_ = m.send(tAck, 0, ack)
	}
	return n, nil
}

// closeWrite tells the peer nothing more comes on ch.
func (m *mux) closeWrite(ch byte) error { return m.send(tEOF, ch, nil) }

func (m *mux) sendResize(s TermSize) error {
	b := binary.BigEndian.AppendUint16(nil, s.Width)
	return m.send(tResize, 0, binary.BigEndian.AppendUint16(b, s.Height))
}

func (m *mux) sendExit(e Exit) error {
	b, _ := json.Marshal(e)
	return m.send(tExit, 0, b)
}

// waitExit waits for the peer's Exit frame.
func (m *mux) waitExit() (Exit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.exit == nil && m.err == nil {
		m.cond.Wait()
	}
	if m.exit != nil {
		return *m.exit, nil
	}
	return Exit{}, m.err
}

// reader and writer are one channel of a mux as io.Reader and io.Writer.
type reader struct {
	m  *mux
	ch byte
}

func (r reader) Read(p []byte) (int, error) { return r.m.read(r.ch, p) }

type writer struct {
	m  *mux
	ch byte
}

func (w writer) Write(p []byte) (int, error) { return w.m.write(w.ch, p) }
