package chaos

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/audit/check"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// cutOff is a connection to a server cut off from the others: no request is answered.
type cutOff struct{}

func (cutOff) Stream(ctx context.Context, _ string) (jetstream.Stream, error) {
	<-ctx.Done()
	return nil, errors.New("no responders")
}

// The samples keep going while one connection's server answers nothing, however long its requests
// wait (here, until the end of the run: a sampler that went through its connections in turn would
// take no sample at all), and they stay in time order with rising sequences, as the checker's search
// needs.
func TestOriginSamplesThroughAnyServer(t *testing.T) {
	_, conn := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := conn.JS.KeyValue(ctx, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	s := newOriginSampler(cutOff{}, conn.JS)
	s.timeout = time.Hour
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, 10*time.Millisecond)
	}()
	stream := bus.KVStream(bus.BucketPods)
	written := map[uint64]time.Time{} // by revision: written by then
	for i := range 5 {
		rev, err := kv.Put(ctx, "k", []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		written[rev] = time.Now()
		bustest.Eventually(t, 5*time.Second, func() bool {
			got := s.origins()[stream]
			return len(got) > 0 && got[len(got)-1].Seq >= rev
		}, "no sample of %s holding revision %d", stream, rev)
	}
	// While nothing is written, the last sample's Until keeps up with the asking.
	idle := time.Now()
	bustest.Eventually(t, 5*time.Second, func() bool {
		got := s.origins()[stream]
		return got[len(got)-1].Until.After(idle)
	}, "the last sample's Until stays before %v", idle)
	cancel()
	<-done
	got := s.origins()[stream]
	if !slices.IsSortedFunc(got, func(a, b check.OriginSample) int { return a.Time.Compare(b.Time) }) {
		t.Errorf("samples out of time order: %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq <= got[i-1].Seq {
			t.Errorf("sample %d: seq %d after %d", i, got[i].Seq, got[i-1].Seq)
		}
		// The first revision after the earlier sample's was written after its Until.
		if w, ok := written[got[i-1].Seq+1]; ok && got[i-1].Until.After(w) {
			t.Errorf("sample %d: Until %v, yet revision %d was written by %v", i-1, got[i-1].Until, got[i-1].Seq+1, w)
		}
	}
}
