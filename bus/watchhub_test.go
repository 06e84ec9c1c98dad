package bus

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// hubTest is an embedded server with one bucket, "w", whose watches a hub shares.
type hubTest struct {
	t   *testing.T
	c   *Conn
	kv  jetstream.KeyValue
	hub *WatchHub
}

func newHubTest(t *testing.T, history uint8) *hubTest {
	t.Helper()
	s, err := RunServer(ServerConfig{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := Connect(ctx, s.ClientURL(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.NC.Close)
	kv, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "w", History: history})
	if err != nil {
		t.Fatal(err)
	}
	return &hubTest{t: t, c: c, kv: kv, hub: NewWatchHub(ctx, c.JS, nil, "w")}
}

// view folds a watcher's entries as a cache would, and checks what jetstream promises of a watch: one
// nil entry after the values, revisions increasing.
type view struct {
	mu      sync.Mutex
	state   map[string]string
	last    uint64
	nils    int
	entries int
	errs    []string
	closed  bool
}

func follow(w jetstream.KeyWatcher) *view {
	v := &view{state: map[string]string{}}
	go func() {
		for e := range w.Updates() {
			v.mu.Lock()
			switch {
			case e == nil:
				v.nils++
			case e.Revision() <= v.last:
				v.errs = append(v.errs, fmt.Sprintf("revision %d after %d", e.Revision(), v.last))
			default:
				v.entries++
				v.last = e.Revision()
				if e.Operation() == jetstream.KeyValuePut {
					v.state[e.Key()] = string(e.Value())
				} else {
					delete(v.state, e.Key())
				}
			}
			v.mu.Unlock()
		}
		v.mu.Lock()
		v.closed = true
		v.mu.Unlock()
	}()
	return v
}

// bucketState is the bucket's keys and values now, and its last revision.
func (h *hubTest) bucketState() (map[string]string, uint64) {
	h.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	keys, err := h.kv.ListKeys(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := h.kv.Get(ctx, k)
		if err != nil {
			h.t.Fatal(err)
		}
		out[k] = string(e.Value())
	}
	rev, err := StoreRevision(ctx, h.kv)
	if err != nil {
		h.t.Fatal(err)
	}
	return out, rev
}

// waitSame waits until v has seen the bucket as it is now.
func (h *hubTest) waitSame(name string, v *view) {
	h.t.Helper()
	want, rev := h.bucketState()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v.mu.Lock()
		same, errs, nils, last := maps.Equal(v.state, want), v.errs, v.nils, v.last
		v.mu.Unlock()
		if len(errs) > 0 {
			h.t.Fatalf("%s: %v", name, errs)
		}
		if same && nils == 1 && (last == rev || len(want) == 0) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: after 10s saw %d keys up to revision %d with %d nil entries; the bucket has %d keys up to %d",
				name, len(v.state), last, nils, len(want), rev)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// consumers is the number of consumers on the bucket's stream.
func (h *hubTest) consumers() int {
	h.t.Helper()
	s, err := h.c.JS.Stream(context.Background(), KVStream("w"))
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Consumers
}

// Watchers joining before, during and after a stream of writes each see the values then every later
// change, as their own watch would show them, while the server feeds one consumer for all of them.
func TestWatchHubWatchersSeeTheBucket(t *testing.T) {
	h := newHubTest(t, 1)
	ctx := context.Background()
	for i := range 20 {
		if _, err := h.kv.Put(ctx, fmt.Sprintf("k%d", i), []byte("v0")); err != nil {
			t.Fatal(err)
		}
	}
	shared := h.hub.Wrap(h.kv)
	if _, ok := shared.(sharedKV); !ok {
		t.Fatalf("Wrap of a shared bucket = %T, want the hub's", shared)
	}
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 300 {
			k := fmt.Sprintf("k%d", rng.IntN(30))
			var err error
			if rng.IntN(5) == 0 {
				err = h.kv.Delete(ctx, k)
			} else {
				_, err = h.kv.Put(ctx, k, fmt.Appendf(nil, "v%d", i))
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var views []*view
	var watchers []jetstream.KeyWatcher
	for i := range 4 {
		w, err := shared.WatchAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		watchers = append(watchers, w)
		views = append(views, follow(w))
		time.Sleep(time.Duration(i) * 5 * time.Millisecond) // join at different points of the writes
	}
	<-writes
	for i, v := range views {
		h.waitSame(fmt.Sprintf("watcher %d", i), v)
	}
	if n := h.hub.Watchers("w"); n != 4 {
		t.Errorf("hub feeds %d watchers, want 4", n)
	}
	// The watchers' own reads are done: the shared consumer is the only one left.
	deadline := time.Now().Add(10 * time.Second)
	for h.consumers() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers on the bucket's stream, want the hub's one", h.consumers())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Stop closes a watcher and takes it off the hub.
	_ = watchers[0].Stop()
	bustestEventually(t, func() bool { views[0].mu.Lock(); defer views[0].mu.Unlock(); return views[0].closed }, "stopped watcher not closed")
	bustestEventually(t, func() bool { return h.hub.Watchers("w") == 3 }, "stopped watcher still fed")
}

// A watcher that does not keep up falls behind, reads what it missed from the store, and sees every
// change in order: it neither loses nor repeats one, and the others were not held up meanwhile.
func TestWatchHubWatcherFallsBehind(t *testing.T) {
	h := newHubTest(t, 1)
	h.hub.maxBehind = 4
	ctx := context.Background()
	shared := h.hub.Wrap(h.kv)
	slow, err := shared.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := shared.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fv := follow(fast)
	// slow's channel holds 256 entries and its queue 4: 400 writes overflow both while nothing reads it.
	for i := range 400 {
		if _, err := h.kv.Put(ctx, fmt.Sprintf("k%d", i%50), fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	h.waitSame("fast watcher", fv)
	sv := follow(slow)
	h.waitSame("slow watcher", sv)
	for i := range 10 {
		if _, err := h.kv.Put(ctx, fmt.Sprintf("k%d", i), []byte("after")); err != nil {
			t.Fatal(err)
		}
	}
	h.waitSame("slow watcher, after catching up", sv)
	h.waitSame("fast watcher, at the end", fv)
}

// When the hub stops, its watchers' channels close, as a watch's do when its connection closes.
func TestWatchHubStopsItsWatchers(t *testing.T) {
	h := newHubTest(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	h.hub = NewWatchHub(ctx, h.c.JS, nil, "w")
	w, err := h.hub.Wrap(h.kv).WatchAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	v := follow(w)
	h.waitSame("watcher", v)
	cancel()
	bustestEventually(t, func() bool { v.mu.Lock(); defer v.mu.Unlock(); return v.closed }, "watcher not closed when the hub stopped")
	if _, err := h.hub.Wrap(h.kv).WatchAll(context.Background()); err == nil {
		t.Error("a stopped hub started a watch")
	}
}

// Other buckets, watches with options and a nil hub go to the bucket's own handle.
func TestWatchHubWrap(t *testing.T) {
	h := newHubTest(t, 1)
	ctx := context.Background()
	other, err := h.c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.hub.Wrap(other); got != other {
		t.Errorf("Wrap of a bucket not shared = %T, want the handle itself", got)
	}
	var nilHub *WatchHub
	if got := nilHub.Wrap(h.kv); got != h.kv {
		t.Errorf("nil hub's Wrap = %T, want the handle itself", got)
	}
	w, err := h.hub.Wrap(h.kv).WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	if _, ok := w.(*hubWatcher); ok || h.hub.Watchers("w") != 0 {
		t.Error("a watch with options went through the hub")
	}
}

func bustestEventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
