package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/internal/podstream"
)

var _ agent.Streamer = (*Runtime)(nil)

// ExecStream implements agent.Streamer: cmd runs in the container's namespaces with its environment,
// connected to s (a terminal when s.TTY); when ctx ends first the process is killed.
func (r *Runtime) ExecStream(ctx context.Context, id agent.ContainerID, cmd []string, s podstream.Streams) (_ int, retErr error) {
	if len(cmd) == 0 {
		return 0, fmt.Errorf("exec in %s: empty command", id)
	}
	c, err := r.load(ctx, id, "exec in")
	if err != nil {
		return 0, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return 0, fmt.Errorf("exec in %s: container not running", id)
	}
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err)
	}
	pspec := *spec.Process
	pspec.Args = cmd
	pspec.Terminal = s.TTY
	// The shim keeps the stdin FIFO open: the process sees the end of its input only when told.
	started := make(chan containerd.Process, 1)
	var stdin io.Reader
	if s.Stdin != nil {
		stdin = &eofReader{r: s.Stdin, onEOF: func() {
			select {
			case p := <-started:
				_ = p.CloseIO(ctx, containerd.WithStdinCloser)
			case <-ctx.Done():
			}
		}}
	}
	opts := []cio.Opt{cio.WithStreams(stdin, s.Stdout, s.Stderr)}
	if s.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	proc, err := task.Exec(ctx, "exec-"+newID()[:16], &pspec, cio.NewCreator(opts...))
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err)
	}
	defer func() {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		if _, err := proc.Delete(cctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) && retErr == nil {
			retErr = fmt.Errorf("exec in %s: %w", id, err)
		}
	}()
	exited, err := proc.Wait(ctx)
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err)
	}
	if err := proc.Start(ctx); err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err)
	}
	started <- proc
	if s.Resize != nil {
		go resizeLoop(ctx, proc, s.Resize)
	}
	select {
	case st := <-exited:
		code, _, err := st.Result()
		if err != nil {
			return 0, fmt.Errorf("exec in %s: %w", id, err)
		}
		proc.IO().Wait() // the output is copied once the process's pipes close
		return int(code), nil
	case <-ctx.Done():
		_ = proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		return 0, fmt.Errorf("exec in %s: %w", id, ctx.Err())
	}
}

// eofReader calls onEOF once when r ends.
type eofReader struct {
	r     io.Reader
	onEOF func()
	once  sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, io.EOF) {
		e.once.Do(e.onEOF)
	}
	return n, err
}

// resizeLoop applies a terminal's sizes to proc until the sizes or ctx end.
func resizeLoop(ctx context.Context, proc containerd.Process, sizes <-chan podstream.TermSize) {
	for {
		select {
		case <-ctx.Done():
			return
		case sz, ok := <-sizes:
			if !ok {
				return
			}
			_ = proc.Resize(ctx, uint32(sz.Width), uint32(sz.Height))
		}
	}
}

// attachPoll is how often an attached client's output is read from the container's log.
const attachPoll = 100 * time.Millisecond

// ErrAttachStdin: the container's spec does not ask for stdin, so there is none to attach to.
var ErrAttachStdin = errors.New("attaching stdin: the container's spec does not set stdin: true")

// AttachStream implements agent.Streamer: the container's main process writes to its log file (the
// shim appends to it, so logging goes on while the agent is down), so its output is followed from the
// file's end until the container exits or ctx ends; stdin, when the spec asks for it, is written to the
// FIFO the task was created with (stream_stdin.go).
func (r *Runtime) AttachStream(ctx context.Context, id agent.ContainerID, s podstream.Streams) error {
	c, err := r.load(ctx, id, "attach to")
	if err != nil {
		return err
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return fmt.Errorf("attach to %s: %w", id, err)
	}
	if s.Stdin != nil && labels[labelStdin] == "" {
		return fmt.Errorf("attach to %s: %w", id, ErrAttachStdin)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return fmt.Errorf("attach to %s: container not running: %w", id, err)
	}
	exited, err := task.Wait(ctx)
	if err != nil {
		return fmt.Errorf("attach to %s: %w", id, err)
	}
	f, err := os.Open(labels[labelLogPath])
	if err != nil {
		return fmt.Errorf("attach to %s: %w", id, err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("attach to %s: %w", id, err)
	}
	// Input only once the output is followed: what the process answers is after this point.
	if s.Stdin != nil {
		done, err := r.attachStdin(ctx, string(id), labels[labelStdin], task, s.Stdin)
		if err != nil {
			return fmt.Errorf("attach to %s: %w", id, err)
		}
		defer done()
	}
	if s.TTY && s.Resize != nil {
		go resizeLoop(ctx, task, s.Resize)
	}
	out := s.Stdout
	if out == nil {
		out = s.Stderr
	}
	if out == nil {
		out = io.Discard
	}
	t := time.NewTicker(attachPoll)
	defer t.Stop()
	for {
		if _, err := io.Copy(out, f); err != nil {
			return fmt.Errorf("attach to %s: %w", id, err)
		}
		select {
		case <-exited:
			_, err := io.Copy(out, f)
			return err
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// PortForward implements agent.Streamer: the connection is dialled from inside the pod's network
// namespace, so the pod's localhost is reachable as with the kubelet.
func (r *Runtime) PortForward(ctx context.Context, sb agent.Sandbox, port int32, conn io.ReadWriter) error {
	rec, err := r.loadRecord(sb.PodUID)
	if err != nil {
		return fmt.Errorf("port-forward to pod %s/%s: %w", sb.Namespace, sb.Name, err)
	}
	pc, err := dialInNetNS(ctx, rec.NetNS, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("port-forward to pod %s/%s port %d: %w", sb.Namespace, sb.Name, port, err)
	}
	defer func() { _ = pc.Close() }()
	go func() {
		// The client's side: when it closes, the pod sees the end of its input.
		_, _ = io.Copy(pc, conn)
		if tc, ok := pc.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = pc.Close() })
	defer stop()
	_, err = io.Copy(conn, pc)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
