package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// endingKV is a bucket whose watches end after n entries, as a watch does when its consumer is given
// up and the connection closes; n < 0: they do not end.
type endingKV struct {
	jetstream.KeyValue
	n int
}

func (k endingKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.Watch(ctx, keys, opts...)
	if err != nil || k.n < 0 {
		return w, err
	}
	return endAfter(ctx, w, k.n), nil
}

type endedWatcher struct{ updates chan jetstream.KeyValueEntry }

func (w endedWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w endedWatcher) Stop() error                             { return nil }

// endAfter passes on n entries of w (fewer if it has not), then stops it and closes.
func endAfter(ctx context.Context, w jetstream.KeyWatcher, n int) jetstream.KeyWatcher {
	out := endedWatcher{updates: make(chan jetstream.KeyValueEntry, n)}
	defer close(out.updates)
	defer func() { _ = w.Stop() }()
	for range n {
		select {
		case e := <-w.Updates():
			out.updates <- e
		case <-ctx.Done():
			return out
		}
	}
	return out
}

// A list whose watch ends before the end of the bucket's values is an error, not a shorter list.
func TestListOfAnEndedWatchFails(t *testing.T) {
	_, conn := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.ProvisionBuckets(ctx, conn.JS, bus.Options{}, pdbKind.storage.spec); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenBucket(ctx, conn.JS, pdbKind.storage.spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Two deleted objects: entries the list reads and skips, so no value needs decoding.
	for _, name := range []string{"a", "b"} {
		key := pdbKind.key("default", name)
		if _, err := kv.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		endAt int
		want  error
	}{
		{"not ended", -1, nil},
		{"ended after one entry", 1, bus.ErrWatchEnded},
		{"ended before any", 0, bus.ErrWatchEnded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &kvSource{kv: endingKV{KeyValue: kv, n: tt.endAt}, ki: pdbKind, decode: pdbKind.decodeEntry}
			objs, _, err := src.list(ctx, pdbKind.keyFilter("default"), everything())
			if !errors.Is(err, tt.want) {
				t.Fatalf("list = %d objects, %v; want %v", len(objs), err, tt.want)
			}
		})
	}
}
