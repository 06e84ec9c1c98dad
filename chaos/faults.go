package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Fault kinds.
const (
	FaultKill     = "kill"      // kill -9 of a service or agent, restarted after a while
	FaultStop     = "stop"      // SIGSTOP of a service or agent (its leases and acks expire), then SIGCONT
	FaultNATSKill = "nats-kill" // kill -9 of a NATS node, restarted on its storage
	FaultNATSStop = "nats-stop" // SIGSTOP of a NATS node, then SIGCONT
	FaultClock    = "clock"     // an agent's clock stepped back (up to 2h) or forward (within the skew)
	// FaultPartition cuts a NATS member's routes to the others (or one link between two members): the
	// connections reset, or held silent (a blackhole), then healed.
	FaultPartition = "partition"
	// FaultDiskFull fills a NATS member's store directory (a tmpfs, root only), then frees it; a member
	// whose JetStream shut down for want of space is restarted, as a liveness probe would.
	FaultDiskFull = "disk-full"
)

// kinds are the faults to draw from, with repeats for weight.
func (fl *faults) kinds() []string {
	k := []string{FaultKill, FaultKill, FaultStop, FaultStop, FaultNATSKill, FaultNATSStop, FaultClock, FaultPartition, FaultPartition}
	if fl.h.full >= 0 {
		k = append(k, FaultDiskFull)
	}
	return k
}

// faults injects one fault at a time at random moments.
type faults struct {
	h   *harness
	cfg Config
	r   *rand.Rand
	f   *os.File
	enc *json.Encoder

	mu     sync.Mutex
	counts map[string]int
	last   time.Time
	clocks []time.Duration // current offset per agent
}

// faultRecord is one line of faults.jsonl.
type faultRecord struct {
	Time   time.Time `json:"time"`
	Seed   int64     `json:"seed"`
	N      int       `json:"n"`
	Kind   string    `json:"kind"`
	Target string    `json:"target"`
	Detail string    `json:"detail,omitempty"`
}

func newFaults(h *harness, cfg Config, path string) (*faults, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &faults{h: h, cfg: cfg, r: rand.New(rand.NewSource(cfg.Seed + 1)), f: f, enc: json.NewEncoder(f),
		counts: map[string]int{}, last: time.Now(), clocks: make([]time.Duration, len(h.agents))}, nil
}

func (fl *faults) close() { _ = fl.f.Close() }

func (fl *faults) count(kind string) int {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.counts[kind]
}

func (fl *faults) lastEnd() time.Time {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.last
}

// run injects faults until ctx ends: first one of each kind in a seeded order, so that even a short
// run has every kind, then kinds drawn by weight.
func (fl *faults) run(ctx context.Context) {
	kinds := fl.kinds()
	var first []string
	for _, k := range kinds {
		if !slices.Contains(first, k) {
			first = append(first, k)
		}
	}
	fl.r.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(between(fl.r, fl.cfg.FaultEvery/2, fl.cfg.FaultEvery*3/2)):
		}
		kind := kinds[fl.r.Intn(len(kinds))]
		if n <= len(first) {
			kind = first[n-1]
		}
		fl.inject(ctx, n, kind)
		fl.mu.Lock()
		fl.last = time.Now()
		fl.mu.Unlock()
	}
}

// inject runs one fault to its end: the process restarted or resumed. A hold is cut short when ctx
// ends, never the recovery.
func (fl *faults) inject(ctx context.Context, n int, kind string) {
	rec := faultRecord{Time: time.Now().UTC(), Seed: fl.cfg.Seed, N: n, Kind: kind}
	hold := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	targets := append(append([]*proc(nil), fl.h.services...), fl.h.agents...)
	var act func()
	switch kind {
	case FaultKill, FaultNATSKill:
		p, d := targets[fl.r.Intn(len(targets))], between(fl.r, 200*time.Millisecond, 3*time.Second)
		if kind == FaultNATSKill {
			p, d = fl.h.nats[fl.r.Intn(len(fl.h.nats))], between(fl.r, time.Second, 8*time.Second)
		}
		if kind == FaultKill && fl.h.real != nil && fl.count(FaultKill) == 0 {
			// The real node's agent dies at least once: what it left running must be taken over or
			// removed. Drawn as any other, so that the seed's choices stay the same.
			p = fl.h.agents[len(fl.h.agents)-1]
		}
		rec.Target, rec.Detail = p.name, "down for "+d.Round(time.Millisecond).String()
		act = func() {
			p.kill()
			hold(d)
			if err := p.restart(); err != nil {
				fl.h.logf("fault %d: restart %s: %v", n, p.name, err)
			}
		}
	case FaultStop, FaultNATSStop:
		p, d := targets[fl.r.Intn(len(targets))], between(fl.r, time.Second, 15*time.Second)
		if kind == FaultNATSStop {
			p, d = fl.h.nats[fl.r.Intn(len(fl.h.nats))], between(fl.r, 500*time.Millisecond, 5*time.Second)
		}
		rec.Target, rec.Detail = p.name, "stopped for "+d.Round(time.Millisecond).String()
		act = func() {
			p.signal(syscall.SIGSTOP)
			hold(d)
			p.signal(syscall.SIGCONT)
		}
	case FaultClock:
		i := fl.r.Intn(len(fl.h.agents))
		step := -between(fl.r, time.Minute, 2*time.Hour)
		if fl.r.Intn(2) == 0 {
			step = between(fl.r, time.Second, 20*time.Second)
		}
		// Forward steps stay within the status service's clock skew (1m): beyond it, reports are refused
		// by design.
		off := min(fl.clocks[i]+step, 20*time.Second)
		fl.clocks[i] = off
		rec.Target, rec.Detail = fl.h.agents[i].name, fmt.Sprintf("clock stepped %s, now %s off", step.Round(time.Second), off.Round(time.Second))
		act = func() {
			if err := os.WriteFile(fl.h.clocks[i], []byte(off.String()+"\n"), 0o644); err != nil {
				fl.h.logf("fault %d: %v", n, err)
			}
		}
	case FaultPartition:
		d, mode := between(fl.r, 2*time.Second, 20*time.Second), []int{linkReset, linkBlackhole}[fl.r.Intn(2)]
		members := len(fl.h.nats)
		i := fl.r.Intn(members)
		if fl.r.Intn(3) > 0 {
			rec.Target = fl.h.nats[i].name
			rec.Detail = fmt.Sprintf("routes to every other member cut (%s) for %s", linkModes[mode], d.Round(time.Millisecond))
			act = func() { fl.h.routes.isolate(i, mode); hold(d); fl.h.routes.heal() }
		} else {
			j := (i + 1 + fl.r.Intn(members-1)) % members
			rec.Target = fl.h.nats[i].name + "<->" + fl.h.nats[j].name
			rec.Detail = fmt.Sprintf("one route cut (%s) for %s; both still reach the third member", linkModes[mode], d.Round(time.Millisecond))
			act = func() { fl.h.routes.cut(i, j, mode); hold(d); fl.h.routes.heal() }
		}
	case FaultDiskFull:
		p, d := fl.h.nats[fl.h.full], between(fl.r, 2*time.Second, 12*time.Second)
		rec.Target, rec.Detail = p.name, "store directory full for "+d.Round(time.Millisecond).String()
		act = func() {
			written, err := fill(fl.h.tmpfs)
			if err != nil {
				fl.h.logf("fault %d: %v", n, err)
			}
			hold(d)
			if err := unfill(fl.h.tmpfs); err != nil {
				fl.h.logf("fault %d: %v", n, err)
			}
			fl.h.logf("fault %d: %s's store had %d MiB free; freed again", n, p.name, written>>20)
			fl.h.liveness(fl.h.full)
		}
	}
	fl.h.logf("fault %d (seed %d): %s %s: %s", n, fl.cfg.Seed, kind, rec.Target, rec.Detail)
	_ = fl.enc.Encode(rec)
	act()
	fl.mu.Lock()
	fl.counts[kind]++
	fl.mu.Unlock()
}
