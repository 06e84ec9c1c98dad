package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// A NATS member's store directory that fills is a size-limited tmpfs mounted there for the whole run
// (root only), filled by one file and freed again. A disk that stalls instead is not among the faults:
// this kernel has no device-mapper (no dm-delay), and throttling a loop device's block I/O does not
// hold back buffered writes; SIGSTOP of the member (nats-stop) stands in for a stalled server.

const fillName = ".chaos-fill"

// fill writes a file into dir until the file system is full, and returns the bytes written.
func fill(dir string) (int64, error) {
	f, err := os.Create(filepath.Join(dir, fillName))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("fill %s: %w", dir, err)
		}
	}
}

// unfill removes the file fill wrote.
func unfill(dir string) error { return os.Remove(filepath.Join(dir, fillName)) }

// liveness restarts NATS member i when its JetStream stays off: nats-server shuts JetStream down when a
// write finds no space, and only a restart turns it on again, as a supervisor's liveness probe
// (/healthz?js-enabled-only=true) would do.
func (h *harness) liveness(i int) {
	ctx := context.Background() // a recovery is never cut short
	url := "http://" + h.natsMon[i] + "/healthz?js-enabled-only=true"
	if poll(ctx, 15*time.Second, func() bool { return httpOK(url) }) == nil {
		return
	}
	p := h.nats[i]
	h.logf("liveness probe: %s's JetStream is off (out of space); restarting it", p.name)
	p.shutdown(10 * time.Second)
	if err := p.restart(); err != nil {
		h.logf("restart %s: %v", p.name, err)
	}
}
