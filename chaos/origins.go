package chaos

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/audit/check"
	"github.com/podbus/podbus/bus"
)

// originSampler records, every period, how far the buckets the Deployment checks read have got:
// AUDIT copies each on its own and may copy one many seconds behind the others after a fault, so the
// checker orders their records by these samples rather than by when AUDIT stored them.
//
// It samples through one connection per NATS server, each on its own: a server cut off from the
// others answers nothing for as long as the partition lasts, and a gap in the samples leaves the
// records written meanwhile timed by AUDIT alone.
type originSampler struct {
	js      []streamInfoer
	timeout time.Duration // of one sample's request
	streams []string
	mu      sync.Mutex
	samples check.Origins
}

// streamInfoer reads a stream's info (jetstream.JetStream does).
type streamInfoer interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

func newOriginSampler(js ...streamInfoer) *originSampler {
	return &originSampler{js: js, timeout: time.Second, samples: check.Origins{},
		streams: []string{bus.KVStream(bus.BucketPods), bus.KVStream(bus.BucketDeployments), bus.KVStream(bus.BucketReplicaSets)}}
}

func (o *originSampler) run(ctx context.Context, period time.Duration) {
	var wg sync.WaitGroup
	for _, js := range o.js {
		wg.Go(func() { o.runOn(ctx, js, period) })
	}
	wg.Wait()
}

func (o *originSampler) runOn(ctx context.Context, js streamInfoer, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		for _, name := range o.streams {
			o.sample(ctx, js, name)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (o *originSampler) sample(ctx context.Context, js streamInfoer, name string) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	asked := time.Now()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return // a member down or cut off: another connection's sample bounds these records
	}
	seq := s.CachedInfo().State.LastSeq
	o.mu.Lock()
	defer o.mu.Unlock()
	// Timed under the lock, so that samples from several connections are in time order too.
	now := time.Now()
	prev := o.samples[name]
	switch {
	case len(prev) == 0 || prev[len(prev)-1].Seq < seq:
		o.samples[name] = append(prev, check.OriginSample{Time: now, Seq: seq, Until: asked})
	case prev[len(prev)-1].Seq == seq && asked.After(prev[len(prev)-1].Until):
		// Still the last: a message after seq was written after this was asked.
		prev[len(prev)-1].Until = asked
	}
}

// origins returns the samples so far.
func (o *originSampler) origins() check.Origins {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := check.Origins{}
	for k, v := range o.samples {
		out[k] = append([]check.OriginSample(nil), v...)
	}
	return out
}

// save writes the samples beside the run's logs, for a replay of the check.
func (o *originSampler) save(path string) error {
	b, err := json.Marshal(o.origins())
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
