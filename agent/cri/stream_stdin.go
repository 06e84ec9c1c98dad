package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A container whose spec asks for stdin gets a FIFO at StateDir/stdin/<container id> as its task's
// stdin. The shim opens the FIFO's read end and also holds a write end of its own, so the process
// never sees the end of its input because a writer went away: attaching opens another write end by
// path, which works the same after the agent restarts (the FIFO and the shim outlive the agent), and
// the input ends only when the shim is told to close its end (stdinOnce, after the first attach).

// labelStdin records the pod spec's stdin of a container: "" (none), stdinOpen or stdinOnce.
const labelStdin = "io.podbus.container.stdin"

const (
	stdinOpen = "open" // stdin: true
	stdinOnce = "once" // stdin: true, stdinOnce: true
)

// ErrStdinClosed: the container's stdin was closed (stdinOnce, after the first attach) or its
// process has ended, so there is nothing to write to.
var ErrStdinClosed = errors.New("the container's stdin is closed")

func stdinMode(c *pb.Container) string {
	switch {
	case !c.GetStdin():
		return ""
	case c.GetStdinOnce():
		return stdinOnce
	default:
		return stdinOpen
	}
}

func (r *Runtime) stdinPath(id string) string { return filepath.Join(r.cfg.StateDir, "stdin", id) }

// stdinCreator makes the FIFO of container id when mode asks for stdin, and wraps creator so the
// task is created with it.
func (r *Runtime) stdinCreator(id, mode string, creator cio.Creator) (cio.Creator, error) {
	if mode == "" {
		return creator, nil
	}
	path := r.stdinPath(id)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("stdin fifo: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("stdin fifo: %w", err) // left by a start that failed
	}
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("stdin fifo: %w", err)
	}
	return func(cid string) (cio.IO, error) {
		io, err := creator(cid)
		if err != nil {
			return nil, err
		}
		return stdinIO{IO: io, path: path}, nil
	}, nil
}

// removeStdin removes container id's FIFO, if it has one.
func (r *Runtime) removeStdin(id string) {
	_ = os.Remove(r.stdinPath(id))
}

// stdinIO is a task's IO with path as the process's stdin.
type stdinIO struct {
	cio.IO
	path string
}

func (s stdinIO) Config() cio.Config {
	c := s.IO.Config()
	c.Stdin = s.path
	return c
}

// stdinCloser is the task, told to close the shim's end of stdin.
type stdinCloser interface {
	CloseIO(ctx context.Context, opts ...containerd.IOCloserOpts) error
}

// attachStdin copies in to container id's stdin until in ends or ctx ends. The returned done is
// to be called when the attach ends: with stdinOnce it closes the shim's end too, so the process
// reads the end of its input, as the kubelet does after the first attach.
func (r *Runtime) attachStdin(ctx context.Context, id, mode string, task stdinCloser, in io.Reader) (done func(), err error) {
	if mode == "" {
		return nil, ErrAttachStdin
	}
	// Non-blocking: with no reader (the shim closed it) the open fails rather than waits.
	w, err := os.OpenFile(r.stdinPath(id), os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENXIO) || errors.Is(err, os.ErrNotExist) {
		return nil, ErrStdinClosed
	}
	if err != nil {
		return nil, fmt.Errorf("open stdin: %w", err)
	}
	var once sync.Once
	finish := func() {
		once.Do(func() {
			_ = w.Close()
			if mode != stdinOnce {
				return
			}
			cctx, cancel := cleanupContext(ctx)
			defer cancel()
			if err := task.CloseIO(cctx, containerd.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
				r.log.Warn("close stdin", "container", id, "err", err)
			}
		})
	}
	stop := context.AfterFunc(ctx, finish) // a Write blocked on a full pipe ends with the file
	go func() {
		_, _ = io.Copy(w, in)
		finish()
	}()
	return func() {
		stop()
		finish()
	}, nil
}
