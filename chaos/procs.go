package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one podbus process the harness supervises: it restarts it when it exits on its own, as a
// process manager would, and counts those exits.
type proc struct {
	name string
	bin  string
	args []string
	logs string // file the process's output is appended to

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd exited
	stopped  bool          // SIGSTOPped
	expected bool          // the current exit is ours (kill)
	exits    int           // exits we did not cause
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked()
}

func (p *proc) startLocked() error {
	f, err := os.OpenFile(p.logs, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = f.Close(); close(done) }()
	p.cmd, p.done, p.stopped, p.expected = cmd, done, false, false
	return nil
}

// ending marks the coming exit as expected (not a crash to restart) and returns the running process.
func (p *proc) ending() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expected = true
	return p.cmd, p.done
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() {
	cmd, done := p.ending()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// signal sends sig (SIGSTOP, SIGCONT) to the running process.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	p.stopped = sig == syscall.SIGSTOP
}

// supervise restarts the process whenever it exits without being killed by the harness, until ctx ends.
func (p *proc) supervise(ctx context.Context, logf func(string, ...any)) {
	for {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-done:
		}
		p.mu.Lock()
		if p.done == done && !p.expected {
			p.exits++
			logf("process %s exited on its own; restarting", p.name)
			if err := p.startLocked(); err != nil {
				logf("restart %s: %v", p.name, err)
			}
		}
		changed := p.done != done
		p.mu.Unlock()
		if !changed { // killed by a fault, which restarts it
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// restart starts a killed process again.
func (p *proc) restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
	default:
		return nil // running
	}
	return p.startLocked()
}

// shutdown ends the process for good: SIGCONT if stopped, SIGTERM, SIGKILL after grace.
func (p *proc) shutdown(grace time.Duration) {
	cmd, done := p.ending()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// logTail is the last n lines of the log at path, for an error that the run's directory may not outlive.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(data), n)
}

// lastLines is the end of s, at most n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func logPath(dir, name string) string { return filepath.Join(dir, "logs", name+".log") }
