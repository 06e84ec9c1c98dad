package podstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/podbus/podbus/bus"
)

// Kind is what a session does.
type Kind string

// Session kinds, as the pod subresources kubectl calls.
const (
	KindExec        Kind = "exec"
	KindAttach      Kind = "attach"
	KindPortForward Kind = "portforward"
)

// Open asks a node's agent for a session: JSON on bus.SubjStreamOpen(node), answered with an OpenReply.
type Open struct {
	Session   string   `json:"session"`
	Kind      Kind     `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	UID       string   `json:"uid"`
	Container string   `json:"container,omitempty"`
	Command   []string `json:"command,omitempty"`
	Stdin     bool     `json:"stdin,omitempty"`
	Stdout    bool     `json:"stdout,omitempty"`
	Stderr    bool     `json:"stderr,omitempty"`
	TTY       bool     `json:"tty,omitempty"`
	Port      int32    `json:"port,omitempty"`
}

// OpenReply accepts a session, or refuses it with an HTTP status code.
type OpenReply struct {
	Error string `json:"error,omitempty"`
	Code  int    `json:"code,omitempty"`
}

// RefusedError is an agent's refusal of a session.
type RefusedError struct {
	Code    int
	Message string
}

func (e *RefusedError) Error() string { return e.Message }

// ErrNoAgent: no agent serves sessions for the node.
var ErrNoAgent = errors.New("no agent serves streams for the node")

const openTimeout = 10 * time.Second

// Client opens sessions on nodes' agents: the API's side.
type Client struct{ NC *nats.Conn }

func (c Client) open(ctx context.Context, node string, o Open) (*mux, error) {
	o.Session = nuid.Next()
	m, err := newMux(ctx, c.NC, bus.SubjStreamOut(node, o.Session), bus.SubjStreamIn(node, o.Session))
	if err != nil {
		return nil, err
	}
	data, _ := json.Marshal(o)
	rctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	msg, err := c.NC.RequestWithContext(rctx, bus.SubjStreamOpen(node), data)
	if errors.Is(err, nats.ErrNoResponders) {
		err = fmt.Errorf("%w: node %q", ErrNoAgent, node)
	}
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("open %s session on node %q: %w", o.Kind, node, err)
	}
	var r OpenReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		m.Close()
		return nil, fmt.Errorf("open %s session on node %q: malformed reply: %w", o.Kind, node, err)
	}
	if r.Error != "" {
		m.Close()
		if r.Code == 0 {
			r.Code = http.StatusInternalServerError
		}
		return nil, &RefusedError{Code: r.Code, Message: r.Error}
	}
	return m, nil
}

// Streams are a command's standard streams on one side; nil ones are not used.
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	Resize         <-chan TermSize
}

// Session is an open session on the API's side.
type Session struct{ m *mux }

// Open opens a session of o.Kind on node's agent; the agent has checked the pod and container and, for
// exec, started the command: its output waits for Exec within the window. Close it when done.
func (c Client) Open(ctx context.Context, node string, o Open) (*Session, error) {
	m, err := c.open(ctx, node, o)
	if err != nil {
		return nil, err
	}
	return &Session{m}, nil
}

// Close ends the session; the agent stops the command if it still runs.
func (ss *Session) Close() { ss.m.Close() }

// Exec connects s to the session's command (or container, KindAttach) and returns how it ended. Streams
// the session was not opened with are ignored.
func (ss *Session) Exec(s Streams) (Exit, error) {
	m := ss.m
	if s.Stdin != nil {
		// Ends when the client closes stdin or the connection (which ends the session: nobody is
		// there any more), or when the session ends.
		go func() {
			if _, err := io.Copy(writer{m, ChanStdin}, s.Stdin); err != nil {
				m.abort(err)
				return
			}
			_ = m.closeWrite(ChanStdin)
		}()
	}
	if s.Resize != nil {
		go func() {
			for {
				select {
				case <-m.done:
					return
				case sz, ok := <-s.Resize:
					if !ok {
						return
					}
					_ = m.sendResize(sz)
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for ch, w := range map[byte]io.Writer{ChanStdout: s.Stdout, ChanStderr: s.Stderr} {
		if w != nil {
			wg.Go(func() {
				if _, err := io.Copy(w, reader{m, ch}); err != nil {
					m.abort(err) // the client is gone: stop the command
				}
			})
		}
	}
	exit, err := m.waitExit()
	wg.Wait() // the agent closes its outputs before it sends the exit
	return exit, err
}

// Exec opens a session of o (KindExec or KindAttach) with s's streams and runs it to its end.
func (c Client) Exec(ctx context.Context, node string, o Open, s Streams) (Exit, error) {
	o.Stdin, o.Stdout, o.Stderr, o.TTY = s.Stdin != nil, s.Stdout != nil, s.Stderr != nil, s.TTY
	ss, err := c.Open(ctx, node, o)
	if err != nil {
		return Exit{}, err
	}
	defer ss.Close()
	return ss.Exec(s)
}

// PortForward copies between stream and port of the pod on node's agent until the pod's side ends.
func (c Client) PortForward(ctx context.Context, node string, o Open, stream io.ReadWriter) error {
	o.Kind = KindPortForward
	m, err := c.open(ctx, node, o)
	if err != nil {
		return err
	}
	defer m.Close()
	go func() {
		if _, err := io.Copy(writer{m, ChanStdin}, stream); err != nil {
			m.abort(err) // the client reset the connection
			return
		}
		_ = m.closeWrite(ChanStdin)
	}()
	if _, err := io.Copy(stream, reader{m, ChanStdin}); err != nil {
		m.abort(err)
	}
	exit, err := m.waitExit()
	if err != nil {
		return err
	}
	if exit.Error != "" {
		return errors.New(exit.Error)
	}
	return nil
}

// Handler runs sessions on the agent's side.
type Handler interface {
	// Exec runs o's command (KindExec) or attaches to its container (KindAttach) with s.
	Exec(ctx context.Context, o Open, s Streams) (Exit, error)
	// PortForward copies between conn and o.Port in the pod's network namespace. It returns when the
	// pod's side of the connection ends; a read of conn returns io.EOF once the client closed its side.
	PortForward(ctx context.Context, o Open, conn io.ReadWriter) error
	// Check refuses a session before it starts (the pod or container is not here): a *RefusedError.
	Check(o Open) error
}

// Serve answers node's session requests with h until ctx ends; the caller unsubscribes.
func Serve(ctx context.Context, nc *nats.Conn, node string, h Handler) (*nats.Subscription, error) {
	subj := bus.SubjStreamOpen(node)
	sub, err := nc.Subscribe(subj, func(msg *nats.Msg) {
		reply := func(r OpenReply) {
			data, _ := json.Marshal(r)
			_ = msg.Respond(data)
		}
		var o Open
		if err := json.Unmarshal(msg.Data, &o); err != nil || o.Session == "" {
			reply(OpenReply{Error: fmt.Sprintf("bad stream request: %v", err), Code: http.StatusBadRequest})
			return
		}
		if err := h.Check(o); err != nil {
			r := OpenReply{Error: err.Error(), Code: http.StatusInternalServerError}
			if re := (*RefusedError)(nil); errors.As(err, &re) {
				r.Code = re.Code
			}
			reply(r)
			return
		}
		m, err := newMux(ctx, nc, bus.SubjStreamIn(node, o.Session), bus.SubjStreamOut(node, o.Session))
		if err != nil {
			reply(OpenReply{Error: err.Error(), Code: http.StatusInternalServerError})
			return
		}
		reply(OpenReply{})
		go serveSession(ctx, m, o, h)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subj, err)
	}
	return sub, nil
}

func serveSession(ctx context.Context, m *mux, o Open, h Handler) {
	defer m.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.done: // the API went away: stop the command's copies
			cancel()
		case <-ctx.Done():
		}
	}()
	if o.Kind == KindPortForward {
		var exit Exit
		if err := h.PortForward(ctx, o, rw{reader{m, ChanStdin}, writer{m, ChanStdin}}); err != nil {
			exit.Error = err.Error()
		}
		_ = m.closeWrite(ChanStdin)
		_ = m.sendExit(exit)
		return
	}
	s := Streams{TTY: o.TTY, Resize: m.resize}
	if o.Stdin {
		s.Stdin = reader{m, ChanStdin}
	}
	if o.Stdout {
		s.Stdout = writer{m, ChanStdout}
	}
	if o.Stderr && !o.TTY {
		s.Stderr = writer{m, ChanStderr}
	}
	exit, err := h.Exec(ctx, o, s)
	if err != nil {
		exit = Exit{Error: err.Error()}
	}
	_ = m.closeWrite(ChanStdout)
	_ = m.closeWrite(ChanStderr)
	_ = m.sendExit(exit)
}

type rw struct {
	io.Reader
	io.Writer
}
