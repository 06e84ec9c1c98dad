package cri

import (
	"fmt"
	"os"
	"path/filepath"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
)

// labelTTY marks a container whose process has a terminal (the pod spec's tty).
const labelTTY = "io.podbus.container.tty"

// taskIO is how a task's output reaches its log file. The shim appends plain stdout and stderr to the
// file itself; a terminal it can only hand to fifos, so a tty container's console output is copied to
// the file by this process until the task ends (what it writes while the agent is down is lost once
// the fifo's buffer is full). afterStart is to be called with the started task.
func (r *Runtime) taskIO(logPath string, tty bool) (creator cio.Creator, afterStart func(containerd.Task), cleanup func(), err error) {
	if !tty {
		return cio.LogFile(logPath), func(containerd.Task) {}, func() {}, nil
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open log: %w", err)
	}
	creator = cio.NewCreator(cio.WithStreams(nil, f, nil), cio.WithTerminal, cio.WithFIFODir(filepath.Join(r.cfg.StateDir, "fifo")))
	afterStart = func(task containerd.Task) {
		go func() {
			task.IO().Wait() // the copy ends when the task's console closes
			task.IO().Close()
			f.Close()
		}()
	}
	return creator, afterStart, func() { f.Close() }, nil
}
