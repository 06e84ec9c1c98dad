package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// maxBehind is how many shared updates a hub watcher may have waiting before it stops queueing them
// and reads what it missed from the store instead, as an ordered consumer does after a gap.
const maxBehind = 1 << 16

// WatchHub shares whole-bucket watches among the services of one process (cluster/up runs them all),
// so that the server delivers each change of a busy bucket once, to the hub, rather than once to
// every service that follows the bucket.
//
// A hub watcher sees what jetstream's WatchAll would show it: the bucket's values (read by a watch of
// its own, on the caller's connection and credential), a nil entry, then every later change in order.
// It joins the shared updates before it reads the values, and passes on only the updates past the last
// revision it read; one that falls maxBehind updates behind reads what it missed from the store, so a
// slow service does not hold up the others. The entries are shared: their values must not be modified.
type WatchHub struct {
	ctx       context.Context
	js        jetstream.JetStream
	log       *slog.Logger
	buckets   map[string]*sharedBucket
	maxBehind int
}

// NewWatchHub shares the watches of the named buckets, read through js, until ctx ends.
func NewWatchHub(ctx context.Context, js jetstream.JetStream, log *slog.Logger, buckets ...string) *WatchHub {
	if log == nil {
		log = slog.Default()
	}
	h := &WatchHub{ctx: ctx, js: js, log: log, buckets: map[string]*sharedBucket{}, maxBehind: maxBehind}
	for _, name := range buckets {
		h.buckets[name] = &sharedBucket{hub: h, name: name, subs: map[*hubWatcher]struct{}{}}
	}
	return h
}

// Wrap returns kv with WatchAll (without options) served by the hub when kv's bucket is shared; kv
// itself otherwise, and when h is nil.
func (h *WatchHub) Wrap(kv jetstream.KeyValue) jetstream.KeyValue {
	if h == nil {
		return kv
	}
	if b, ok := h.buckets[kv.Bucket()]; ok {
		return sharedKV{KeyValue: kv, b: b}
	}
	return kv
}

// WrapBuckets wraps each of b's buckets.
func (h *WatchHub) WrapBuckets(b Buckets) Buckets {
	return Buckets{Pods: h.Wrap(b.Pods), Nodes: h.Wrap(b.Nodes), Alloc: h.Wrap(b.Alloc), Commit: h.Wrap(b.Commit)}
}

// sharedKV is a bucket handle whose whole-bucket watches come from a hub.
type sharedKV struct {
	jetstream.KeyValue
	b *sharedBucket
}

// WatchAll serves a plain whole-bucket watch from the hub; a watch with options is the handle's own.
func (s sharedKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	if len(opts) > 0 {
		return s.KeyValue.WatchAll(ctx, opts...)
	}
	return s.b.watch(ctx, s.KeyValue)
}

// sharedBucket is one shared bucket: its watch of updates, while it runs, and the watchers it feeds.
type sharedBucket struct {
	hub  *WatchHub
	name string

	mu   sync.Mutex
	live bool // the shared watch runs
	subs map[*hubWatcher]struct{}
}

// watch joins a new watcher to the shared updates, then starts it on the values it reads through own.
func (b *sharedBucket) watch(ctx context.Context, own jetstream.KeyValue) (jetstream.KeyWatcher, error) {
	w := &hubWatcher{b: b, own: own, updates: make(chan jetstream.KeyValueEntry, 256), wake: make(chan struct{}, 1)}
	if err := b.join(w); err != nil {
		return nil, err
	}
	initial, err := own.WatchAll(ctx)
	if err != nil {
		b.leave(w)
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	go w.run(wctx, initial)
	return w, nil
}

// join adds w to the watchers fed from now on, and starts the shared watch if it is not running. The
// shared consumer exists when join returns, so every change after w's own read reaches w.
func (b *sharedBucket) join(w *hubWatcher) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.live {
		if err := b.hub.ctx.Err(); err != nil {
			return fmt.Errorf("watch %s: hub stopped: %w", b.name, err)
		}
		kv, err := b.hub.js.KeyValue(b.hub.ctx, b.name)
		if err != nil {
			return fmt.Errorf("watch %s: %w", b.name, err)
		}
		// The shared watch resumes when its consumer is given up, from the bucket's revision before it
		// opened if it had no update yet, so its watchers miss nothing.
		sw, err := resumeUpdates(b.hub.ctx, kv, kv.WatchAll, nil)
		if err != nil {
			return fmt.Errorf("watch %s: %w", b.name, err)
		}
		b.live = true
		go b.pump(sw)
	}
	b.subs[w] = struct{}{}
	return nil
}

func (b *sharedBucket) leave(w *hubWatcher) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, w)
}

// pump hands every shared update to every watcher. When the shared watch ends (the hub's context, a
// closed connection: it resumes otherwise), so do its watchers, as a watch of their own would; the
// next watcher starts it again.
func (b *sharedBucket) pump(sw jetstream.KeyWatcher) {
	for e := range sw.Updates() {
		if e == nil {
			continue
		}
		b.mu.Lock()
		for w := range b.subs {
			w.push(e)
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live = false
	for w := range b.subs {
		w.end()
	}
	clear(b.subs)
	if b.hub.ctx.Err() == nil {
		b.hub.log.Warn("shared watch ended", "bucket", b.name)
	}
}

// maxSpare is the largest queue a watcher keeps for reuse.
const maxSpare = 4096

// hubWatcher is one caller's watch, fed by the hub.
type hubWatcher struct {
	b       *sharedBucket
	own     jetstream.KeyValue
	updates chan jetstream.KeyValueEntry
	cancel  context.CancelFunc
	wake    chan struct{} // signalled when the queue changes

	mu     sync.Mutex
	queue  []jetstream.KeyValueEntry // shared updates not yet passed on
	spare  []jetstream.KeyValueEntry // the last batch taken, passed on and emptied: the next queue
	behind bool                      // updates were dropped: the queue was full
	ended  bool                      // the shared watch ended
}

func (w *hubWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop ends the watch; Updates is closed soon after.
func (w *hubWatcher) Stop() error {
	w.cancel()
	return nil
}

// push queues a shared update, or drops it and marks w behind when the queue is full. Called with the
// bucket locked.
func (w *hubWatcher) push(e jetstream.KeyValueEntry) {
	w.mu.Lock()
	switch {
	case w.behind:
	case len(w.queue) >= w.b.hub.maxBehind:
		w.behind = true
	default:
		w.queue = append(w.queue, e)
	}
	w.mu.Unlock()
	w.signal()
}

// end marks the shared watch ended. Called with the bucket locked.
func (w *hubWatcher) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
	w.signal()
}

func (w *hubWatcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns the queued updates and whether w fell behind or the shared watch ended; it leaves the
// queue empty.
func (w *hubWatcher) take() (batch []jetstream.KeyValueEntry, behind, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	batch, w.queue, w.spare = w.queue, w.spare, nil
	return batch, w.behind, w.ended
}

// recycle gives back a batch from take once it is passed on, so that the queue is not grown again
// from nothing after each take.
func (w *hubWatcher) recycle(batch []jetstream.KeyValueEntry) {
	if cap(batch) > maxSpare {
		return // a burst's queue is not kept for the quiet after it
	}
	clear(batch) // the entries' values may be large: not kept beyond their turn
	w.mu.Lock()
	defer w.mu.Unlock()
	w.spare = batch[:0]
}

// rejoin clears the queue and the behind mark: updates from now on are queued again.
func (w *hubWatcher) rejoin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue, w.behind = nil, false
}

// run passes on the values w read itself, a nil entry, then the shared updates after them. Updates is
// closed when it returns.
func (w *hubWatcher) run(ctx context.Context, initial jetstream.KeyWatcher) {
	defer close(w.updates)
	defer w.b.leave(w)
	last, ok := w.forward(ctx, initial, 0, true)
	for ok {
		var behind bool
		if last, behind = w.follow(ctx, last); !behind {
			return
		}
		// Too far behind: read what was dropped from the store, queueing new updates meanwhile.
		w.rejoin()
		missed, err := w.own.WatchAll(ctx, jetstream.ResumeFromRevision(last+1))
		if err != nil {
			if ctx.Err() == nil {
				w.b.hub.log.Error("shared watch: catching up failed", "bucket", w.b.name, "revision", last+1, "err", err)
			}
			return
		}
		last, ok = w.forward(ctx, missed, last, false)
	}
}

// forward passes on kw's entries past revision last until its nil entry (passed on too when sendNil),
// and stops kw. False when kw closed first or ctx ended.
func (w *hubWatcher) forward(ctx context.Context, kw jetstream.KeyWatcher, last uint64, sendNil bool) (uint64, bool) {
	defer func() { _ = kw.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return last, false
		case e, ok := <-kw.Updates():
			switch {
			case !ok:
				return last, false
			case e == nil:
				return last, !sendNil || w.send(ctx, nil)
			case e.Revision() <= last:
			default:
				if !w.send(ctx, e) {
					return last, false
				}
				last = e.Revision()
			}
		}
	}
}

// follow passes on the shared updates past revision last, until w falls behind (true) or the shared
// watch or ctx ends (false).
func (w *hubWatcher) follow(ctx context.Context, last uint64) (uint64, bool) {
	for {
		batch, behind, ended := w.take()
		for _, e := range batch {
			if e.Revision() <= last {
				continue
			}
			if !w.send(ctx, e) {
				return last, false
			}
			last = e.Revision()
		}
		w.recycle(batch)
		switch {
		case behind:
			return last, true
		case ended:
			return last, false
		}
		select {
		case <-ctx.Done():
			return last, false
		case <-w.wake:
		}
	}
}

func (w *hubWatcher) send(ctx context.Context, e jetstream.KeyValueEntry) bool {
	select {
	case w.updates <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

// Watchers is how many watchers the hub feeds for bucket, for tests and metrics.
func (h *WatchHub) Watchers(bucket string) int {
	b, ok := h.buckets[bucket]
	if !ok {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}
