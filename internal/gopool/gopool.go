// Package gopool runs short functions on goroutines that outlive them. A new goroutine starts with a
// small stack and grows it, copying it each time, as a call goes deep (decoding, a NATS request); a
// goroutine that serves many calls grows it once.
package gopool

import (
	"context"
	"slices"
	"sync"
)

// Pool hands functions to idle workers. Its zero value is not usable: see New.
type Pool struct {
	ctx context.Context
	max int

	mu      sync.Mutex
	idle    []*worker // most recently idle last: its stack and caches are the warmest
	workers int       // running, idle or busy
}

type worker struct {
	work chan func() // one slot: a worker is handed a function only while idle
}

// New returns a pool of at most max workers; they end once ctx has. Functions given after that still
// run.
func New(ctx context.Context, max int) *Pool {
	return &Pool{ctx: ctx, max: max}
}

// Go runs f on an idle worker if there is one, else on a new worker while fewer than max run, else on
// a goroutine of its own. It never waits, so the pool neither slows nor bounds its callers.
func (p *Pool) Go(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.work <- f
		return
	}
	start := p.workers < p.max
	if start {
		p.workers++
	}
	p.mu.Unlock()
	if start {
		go p.run(&worker{work: make(chan func(), 1)}, f)
		return
	}
	go f()
}

func (p *Pool) run(w *worker, f func()) {
	for {
		f()
		p.mu.Lock()
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		select {
		case f = <-w.work:
			continue
		case <-p.ctx.Done():
		}
		p.mu.Lock()
		if i := slices.Index(p.idle, w); i >= 0 {
			p.idle = slices.Delete(p.idle, i, i+1)
			p.workers--
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		// Go took this worker as the pool ended: its function is on the way.
		f = <-w.work
	}
}

// workerCount is how many workers run, idle or busy (for tests).
func (p *Pool) workerCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.workers
}

// idleCount is how many workers wait for a function (for tests).
func (p *Pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
