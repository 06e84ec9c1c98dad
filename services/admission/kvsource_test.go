package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podtest"
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

// pdbBucket is the budgets' bucket on a server of the test's own.
func pdbBucket(ctx context.Context, t *testing.T) jetstream.KeyValue {
	t.Helper()
	_, conn := bustest.Start(t)
	if err := bus.ProvisionBuckets(ctx, conn.JS, bus.Options{}, pdbKind.storage.spec); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.OpenBucket(ctx, conn.JS, pdbKind.storage.spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// A list whose watch ends before the end of the bucket's values is an error, not a shorter list.
func TestListOfAnEndedWatchFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := pdbBucket(ctx, t)
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

// scriptedKV is a bucket whose watches deliver entries, then the end of the initial values.
type scriptedKV struct {
	jetstream.KeyValue
	entries []jetstream.KeyValueEntry
}

func (k scriptedKV) Watch(context.Context, string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w := endedWatcher{updates: make(chan jetstream.KeyValueEntry, len(k.entries)+1)}
	for _, e := range k.entries {
		w.updates <- e
	}
	w.updates <- nil
	return w, nil
}

// A key written while a list reads the initial values may come twice before the end of them, its old
// value and the change; the list holds it once, as of the revision it returns. An eviction that saw
// both found "more than one PodDisruptionBudget" where there was one.
func TestListHoldsEachKeyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv := pdbBucket(ctx, t)
	put := func(name string, allowed int32, rev uint64) jetstream.KeyValueEntry {
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
		b, err := json.Marshal(pdb)
		if err != nil {
			t.Fatal(err)
		}
		return &podtest.Entry{K: pdbKind.key("default", name), V: b, Rev: rev, Op: jetstream.KeyValuePut}
	}
	del := func(name string, rev uint64) jetstream.KeyValueEntry {
		return &podtest.Entry{K: pdbKind.key("default", name), Rev: rev, Op: jetstream.KeyValueDelete}
	}
	bad := func(name string, rev uint64) jetstream.KeyValueEntry {
		return &podtest.Entry{K: pdbKind.key("default", name), V: []byte("{"), Rev: rev, Op: jetstream.KeyValuePut}
	}
	tests := []struct {
		name    string
		entries []jetstream.KeyValueEntry
		want    []string // name@resourceVersion/disruptionsAllowed, in order
		wantRV  uint64
	}{
		{"no change", []jetstream.KeyValueEntry{put("a", 1, 1), put("b", 1, 2)}, []string{"a@1/1", "b@2/1"}, 2},
		{"changed", []jetstream.KeyValueEntry{put("a", 1, 1), put("b", 1, 2), put("a", 0, 3)}, []string{"a@3/0", "b@2/1"}, 3},
		{"deleted", []jetstream.KeyValueEntry{put("a", 1, 1), put("b", 1, 2), del("a", 3)}, []string{"b@2/1"}, 3},
		{"deleted and made again", []jetstream.KeyValueEntry{put("a", 1, 1), del("a", 2), put("a", 2, 3)}, []string{"a@3/2"}, 3},
		{"changed to a malformed value", []jetstream.KeyValueEntry{put("a", 1, 1), put("b", 1, 2), bad("a", 3)}, []string{"b@2/1"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &kvSource{kv: scriptedKV{KeyValue: kv, entries: tt.entries}, ki: pdbKind, decode: pdbKind.decodeEntry}
			objs, rv, err := src.list(ctx, pdbKind.keyFilter("default"), everything())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				p := o.(*policyv1.PodDisruptionBudget)
				got = append(got, fmt.Sprintf("%s@%s/%d", p.Name, p.ResourceVersion, p.Status.DisruptionsAllowed))
			}
			if !slices.Equal(got, tt.want) || rv != tt.wantRV {
				t.Errorf("list = %v at %d, want %v at %d", got, rv, tt.want, tt.wantRV)
			}
		})
	}
}
