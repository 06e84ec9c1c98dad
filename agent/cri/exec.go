package cri

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"github.com/podbus/podbus/agent"
)

// ExecSync implements agent.ContainerManager: cmd runs in the container's namespaces with its
// environment; stdout and stderr come back together. A command still running after timeout is killed.
func (r *Runtime) ExecSync(ctx context.Context, id agent.ContainerID, cmd []string, timeout time.Duration) (_ agent.ExecResult, retErr error) {
	if len(cmd) == 0 {
		return agent.ExecResult{}, fmt.Errorf("exec in %s: empty command", id)
	}
	c, err := r.load(ctx, id, "exec in")
	if err != nil {
		return agent.ExecResult{}, err
	}
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return agent.ExecResult{}, fmt.Errorf("exec in %s: container not running", id)
	}
	if err != nil {
		return agent.ExecResult{}, fmt.Errorf("exec in %s: %w", id, err)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return agent.ExecResult{}, fmt.Errorf("exec in %s: %w", id, err)
	}
	pspec := *spec.Process
	pspec.Args = cmd
	pspec.Terminal = false

	var out lockedBuffer
	proc, err := task.Exec(ctx, "exec-"+newID()[:16], &pspec, cio.NewCreator(cio.WithStreams(nil, &out, &out)))
	if err != nil {
		return agent.ExecResult{}, fmt.Errorf("exec in %s: %w", id, err)
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
		return agent.ExecResult{}, fmt.Errorf("exec in %s: %w", id, err)
	}
	if err := proc.Start(ctx); err != nil {
		return agent.ExecResult{}, fmt.Errorf("exec in %s: %w", id, err)
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case st := <-exited:
		code, _, err := st.Result()
		if err != nil {
			return agent.ExecResult{}, fmt.Errorf("exec in %s: %w", id, err)
		}
		proc.IO().Wait() // the output is copied once the process's pipes close
		return agent.ExecResult{ExitCode: int32(code), Output: out.Bytes()}, nil
	case <-timer.C:
		_ = proc.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		return agent.ExecResult{}, fmt.Errorf("exec in %s: command %q timed out after %s", id, cmd, timeout)
	case <-ctx.Done():
		return agent.ExecResult{}, fmt.Errorf("exec in %s: %w", id, ctx.Err())
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
