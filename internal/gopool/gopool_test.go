package gopool

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every function runs, whether a worker takes it, a new worker starts for it, the pool is full or
// its context has ended; and the workers stay within max.
func TestPoolRunsEverything(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max      int
		calls    int
		canceled bool
	}{
		{"no workers", 0, 20, false},
		{"one worker", 1, 20, false},
		{"more calls than workers", 4, 50, false},
		{"ended pool", 4, 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := New(ctx, tc.max)
			if tc.canceled {
				cancel()
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			ran := 0
			for range tc.calls {
				wg.Add(1)
				p.Go(func() {
					defer wg.Done()
					mu.Lock()
					ran++
					mu.Unlock()
				})
				if n := p.workerCount(); n > tc.max {
					t.Fatalf("%d workers, max %d", n, tc.max)
				}
			}
			wg.Wait()
			if ran != tc.calls {
				t.Fatalf("ran %d of %d", ran, tc.calls)
			}
		})
	}
}

// Go never waits: with every worker busy, the next function runs on a goroutine of its own.
func TestPoolNeverWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := New(ctx, 2)
	release := make(chan struct{})
	started := make(chan struct{}, 5)
	for range 5 {
		p.Go(func() {
			started <- struct{}{}
			<-release
		})
	}
	for range 5 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("a function given to a busy pool did not start")
		}
	}
	if n := p.workerCount(); n != 2 {
		t.Errorf("%d workers, want 2", n)
	}
	close(release)
}

// An idle worker takes the next function instead of a new goroutine, and the workers end with the
// pool's context.
func TestPoolReusesAndEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := New(ctx, 1)
	ids := make(chan string, 1)
	run := func() { ids <- goroutineID() }
	p.Go(run)
	first := <-ids
	for i := range 20 {
		waitFor(t, "the worker idle", func() bool { return p.idleCount() == 1 })
		p.Go(run)
		if id := <-ids; id != first {
			t.Fatalf("call %d ran on goroutine %s, not on the idle worker %s", i, id, first)
		}
	}
	waitFor(t, "the worker idle", func() bool { return p.idleCount() == 1 })
	cancel()
	waitFor(t, "no worker after the pool's context ended", func() bool { return p.workerCount() == 0 })
	p.Go(run) // still runs
	<-ids
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// goroutineID is the running goroutine's number, from the first line of its stack ("goroutine 7 [").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	return f[1]
}
