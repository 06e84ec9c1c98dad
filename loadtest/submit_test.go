package loadtest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeSink records when each pod was meant to go and when its send returned, taking at least service
// per pod.
type fakeSink struct {
	service time.Duration
	mu      sync.Mutex
	sent    map[int]time.Time // intended
	picked  map[int]time.Time // when a worker called send
	done    map[int]time.Time
}

func newFakeSink(service time.Duration) *fakeSink {
	return &fakeSink{service: service, sent: map[int]time.Time{}, picked: map[int]time.Time{}, done: map[int]time.Time{}}
}

func (f *fakeSink) send(_ context.Context, i int, intended time.Time) {
	picked := time.Now()
	time.Sleep(f.service) // the sink's work, not a wait for a condition
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent[i], f.picked[i], f.done[i] = intended, picked, time.Now()
}

// Under a rate each pod's start is its place in the schedule, whenever a worker takes it.
func TestSubmitterIntendedSchedule(t *testing.T) {
	const n, rate = 50, 2000.0
	sink := newFakeSink(0)
	start := submitter{n: n, rate: rate, concurrency: 4, send: sink.send}.run(context.Background())
	if len(sink.done) != n {
		t.Fatalf("%d of %d pods sent", len(sink.done), n)
	}
	for i := range n {
		want := start.Add(time.Duration(i) * time.Second / rate)
		if !sink.sent[i].Equal(want) {
			t.Errorf("pod %d intended at %v, want start+%v", i, sink.sent[i].Sub(start), want.Sub(start))
		}
		if sink.picked[i].Before(sink.sent[i]) {
			t.Errorf("pod %d sent %v before its intended start", i, sink.sent[i].Sub(sink.picked[i]))
		}
	}
}

// A sink slower than the schedule (one worker, 5ms per pod, a pod every 1ms) makes the pods queue, and
// the latencies measured from the intended start show it: pod i waits for the i pods before it, so its
// latency is at least 5ms·(i+1) − 1ms·i. Measured from the worker's pickup, every latency would be the
// 5ms of service alone.
func TestSubmitterSaturatedShowsQueueing(t *testing.T) {
	const n, rate, service = 20, 1000.0, 5 * time.Millisecond
	tests := []struct {
		name     string
		rate     float64
		queueing bool
	}{
		{"rate: from the schedule", rate, true},
		{"no rate: from the pickup", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := newFakeSink(service)
			submitter{n: n, rate: tt.rate, concurrency: 1, send: sink.send}.run(context.Background())
			var h histogram
			for i := range n {
				h.Record(sink.done[i].Sub(sink.sent[i]))
			}
			if !tt.queueing {
				// With one worker, each pod is stamped once the one before it is done.
				for i := 1; i < n; i++ {
					if sink.sent[i].Before(sink.done[i-1]) || sink.sent[i].After(sink.picked[i]) {
						t.Errorf("pod %d stamped at %v, want at its pickup %v", i, sink.sent[i], sink.picked[i])
					}
				}
				return
			}
			last := n - 1
			floor := time.Duration(last+1)*service - time.Duration(last)*time.Second/rate
			if got := sink.done[last].Sub(sink.sent[last]); got < floor {
				t.Errorf("last pod's latency %v, want at least %v (its queueing)", got, floor)
			}
			if got := h.Max(); got < floor {
				t.Errorf("histogram max %v, want at least %v", got, floor)
			}
			if p50 := h.Quantile(0.5); p50 < 2*service {
				t.Errorf("p50 %v: the queueing should show beyond one service time %v", p50, service)
			}
		})
	}
}

// The gate holds pods back and its false ends the submission.
func TestSubmitterGate(t *testing.T) {
	sink := newFakeSink(0)
	gate := func(_ context.Context, i int) bool { return i < 7 }
	submitter{n: 20, concurrency: 3, gate: gate, send: sink.send}.run(context.Background())
	if len(sink.done) != 7 {
		t.Errorf("%d pods sent, want the 7 the gate let through", len(sink.done))
	}
}
