package loadtest

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// machineProbe times a fixed piece of work now and then by the CPU time of the thread that does it: a
// walk through memory larger than the caches, then a hash. The envelope's processes share the machine
// with whatever else runs on its host; when a slice's pods cost more CPU while the probe costs as
// much, the pipeline's work grew, and when the probe costs more too, the machine ran slower (a busy
// host, caches shared with other tenants, a lower clock).
type machineProbe struct {
	next []uint32 // a single random cycle through every index: each step is a cache miss
	data []byte   // what is hashed

	mu      sync.Mutex
	samples []probeSample
}

type probeSample struct {
	at  time.Time
	cpu time.Duration
}

const (
	probeEvery = 2 * time.Second
	probeWords = 16 << 20 // 64 MiB of uint32: beyond any cache of the machines this runs on
	probeSteps = 1 << 15
	probeBytes = 1 << 20
)

func newMachineProbe() *machineProbe {
	return &machineProbe{next: randomCycle(probeWords), data: make([]byte, probeBytes)}
}

// randomCycle is a permutation of 0..n-1 that forms one cycle (Sattolo's algorithm), so that a walk
// from any index visits every other before it returns.
func randomCycle(n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(i)
	}
	for i := n - 1; i > 0; i-- {
		j := rand.IntN(i)
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// run samples every probeEvery until ctx ends.
func (p *machineProbe) run(ctx context.Context) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		if cpu, ok := p.measure(); ok {
			p.mu.Lock()
			p.samples = append(p.samples, probeSample{at: time.Now(), cpu: cpu})
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sink keeps the probe's results alive so that the compiler cannot drop its work.
var sink struct {
	sync.Mutex
	i   uint32
	sum [sha256.Size]byte
}

// measure does the probe's work once on a thread of its own and returns that thread's CPU time for it.
func (p *machineProbe) measure() (time.Duration, bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a, b unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &a) != nil {
		return 0, false
	}
	i := uint32(0)
	for range probeSteps {
		i = p.next[i]
	}
	sum := sha256.Sum256(p.data)
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &b) != nil {
		return 0, false
	}
	sink.Lock()
	sink.i, sink.sum = i, sum
	sink.Unlock()
	return time.Duration(b.Nano() - a.Nano()), true
}

// median is the median CPU time of the samples taken in [from, to] (the upper one of an even count);
// false with none.
func (p *machineProbe) median(from, to time.Time) (time.Duration, bool) {
	p.mu.Lock()
	var in []time.Duration
	for _, s := range p.samples {
		if !s.at.Before(from) && !s.at.After(to) {
			in = append(in, s.cpu)
		}
	}
	p.mu.Unlock()
	if len(in) == 0 {
		return 0, false
	}
	slices.Sort(in)
	return in[len(in)/2], true
}
