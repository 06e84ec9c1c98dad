package loadtest

import (
	"context"
	"sync"
	"time"
)

// submitter sends n pods through concurrency workers, at rate pods/s (0: as fast as the workers take
// them).
type submitter struct {
	n           int
	rate        float64
	concurrency int
	// gate holds pod i back (the window) and reports false when ctx ended first; nil holds nothing.
	gate func(ctx context.Context, i int) bool
	// send submits pod i. intended is when the pod was meant to go: its place in the schedule under a
	// rate, so that a pod waiting for a free worker counts its wait (no coordinated omission); without a
	// rate, the moment a worker picked it up.
	send func(ctx context.Context, i int, intended time.Time)
}

// intendedStart is pod i's place in a schedule of rate pods/s from start.
func intendedStart(start time.Time, rate float64, i int) time.Time {
	return start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
}

// run submits the pods and returns once every send has returned, with the schedule's start.
func (s submitter) run(ctx context.Context) time.Time {
	jobs := make(chan int)
	start := time.Now()
	var wg sync.WaitGroup
	for range max(s.concurrency, 1) {
		wg.Go(func() {
			for i := range jobs {
				intended := time.Now()
				if s.rate > 0 {
					intended = intendedStart(start, s.rate, i)
				}
				s.send(ctx, i, intended)
			}
		})
	}
	wg.Go(func() {
		defer close(jobs)
		for i := range s.n {
			if s.rate > 0 {
				if d := time.Until(intendedStart(start, s.rate, i)); d > 0 {
					timer := time.NewTimer(d)
					select {
					case <-timer.C:
					case <-ctx.Done():
						timer.Stop()
						return
					}
				}
			}
			if s.gate != nil && !s.gate(ctx, i) {
				return
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	})
	wg.Wait()
	return start
}
