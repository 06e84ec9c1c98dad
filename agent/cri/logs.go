package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"github.com/podbus/podbus/agent"
)

// ContainerLogs implements agent.ContainerManager. Each attempt of a container has its own file, so
// Previous reads attempt-1 of the same container name, even when that container was removed.
func (r *Runtime) ContainerLogs(ctx context.Context, id agent.ContainerID, w io.Writer, opts agent.LogOptions) error {
	c, err := r.load(ctx, id, "logs of")
	if err != nil {
		return err
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return fmt.Errorf("logs of %s: %w", id, err)
	}
	path := labels[labelLogPath]
	if opts.Previous {
		attempt, _ := strconv.Atoi(labels[LabelAttempt])
		if attempt == 0 {
			return fmt.Errorf("previous terminated container %q in pod %s/%s: %w", labels[LabelContainerName],
				labels[LabelPodNamespace], labels[LabelPodName], agent.ErrNotFound)
		}
		path = r.logPath(labels[LabelPodUID], labels[LabelContainerName], int32(attempt-1))
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // not started yet: no output
	}
	if err != nil {
		return fmt.Errorf("logs of %s: %w", id, err)
	}
	if n := opts.TailLines; n > 0 {
		b = tail(b, n)
	}
	_, err = w.Write(b)
	return err
}

// tail returns the last n lines of b.
func tail(b []byte, n int64) []byte {
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end-- // the final newline ends the last line, it does not start another
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
