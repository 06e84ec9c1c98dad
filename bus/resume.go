package bus

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/internal/ctxtime"
	"github.com/podbus/podbus/internal/metrics"
)

// WatchAll, Watch and WatchFiltered are nats.go's, with watches that resume (see resumingWatcher) and
// whose nil entry comes once every key's value is in (see fence). A watch with jetstream.IgnoreDeletes
// may not see its fence: give deletes up in the caller instead.
func (b *Bucket) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return resumeWatch(ctx, b.Bucket(), 0, b.fence(">"), func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		return b.KeyValue.WatchAll(ctx, opts...)
	}, opts)
}

// Watch is WatchAll of the keys matching keys.
func (b *Bucket) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return resumeWatch(ctx, b.Bucket(), 0, b.fence(keys), func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		return b.KeyValue.Watch(ctx, keys, opts...)
	}, opts)
}

// WatchFiltered is WatchAll of the keys matching any of keys.
func (b *Bucket) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return resumeWatch(ctx, b.Bucket(), 0, b.fence(keys...), func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		return b.KeyValue.WatchFiltered(ctx, keys, opts...)
	}, opts)
}

// WatchUpdates watches the changes after the call (jetstream.UpdatesOnly) of the keys matching any of
// keys. On a bucket opened by OpenBucket the watch resumes, and it reads the bucket's revision before it
// opens: a watch that ends before its first update resumes from there, not from the present.
func WatchUpdates(ctx context.Context, kv jetstream.KeyValue, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	b := bucketOf(kv)
	if b == nil {
		return kv.WatchFiltered(ctx, keys, append(slices.Clip(opts), jetstream.UpdatesOnly())...)
	}
	return resumeUpdates(ctx, b.KeyValue, func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		return b.KeyValue.WatchFiltered(ctx, keys, opts...)
	}, opts)
}

// resumeUpdates is resumeWatch of updates only, from kv's revision before the watch opens.
func resumeUpdates(ctx context.Context, kv jetstream.KeyValue, open openWatch, opts []jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	floor, err := StoreRevision(ctx, kv)
	if err != nil {
		return nil, err
	}
	return resumeWatch(ctx, kv.Bucket(), floor, nil, open, append(slices.Clip(opts), jetstream.UpdatesOnly()))
}

// fenceFunc reads a watch's fence: the last entry under its keys, from the stream leader (revision 0
// when there is none), waiting out missing answers until ctx ends.
type fenceFunc func(ctx context.Context) (lastMsg, error)

// fence is the fenceFunc of a watch of keys (patterns) on b.
func (b *Bucket) fence(keys ...string) fenceFunc {
	return func(ctx context.Context) (lastMsg, error) {
		var last lastMsg
		for _, k := range keys {
			m, err := b.lastEntry(ctx, k)
			if err != nil {
				return lastMsg{}, err
			}
			if m.seq > last.seq {
				last = m
			}
		}
		return last, nil
	}
}

// Variables for the tests.
var (
	// fenceRecheck is how long a watch holds its nil entry for the fenced entry before reading the
	// fence again: the entry may have been removed since (by its age), with nothing after it.
	fenceRecheck = time.Second
	// fenceGiveUp is how long a watch holds its nil entry for a fence that is a delete, which a watch
	// with jetstream.IgnoreDeletes never passes on, before it passes the nil entry on as nats.go placed it.
	fenceGiveUp = 10 * time.Second
)

// openWatch opens one watch of a bucket with the options given.
type openWatch func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)

// ResumePause is how long a resuming watch waits before asking again when opening its next watch
// failed.
const ResumePause = RelistPause

// resumingWatcher is a watch that outlives the watches under it. nats.go gives a watch's ordered
// consumer up, and closes its updates, when recreating the consumer fails with an error it does not
// retry: a reconnect that drops the request, a stream whose leader is being elected. A resumingWatcher
// then opens the same watch again from the revision after the last entry it passed on, as a reflector
// resumes from its last resourceVersion. That watch delivers every entry the bucket kept since, in
// order, so the caller sees what one unbroken watch would have shown it: its nil entry once, at the end
// of the initial values, and every later change after it, none twice. Its updates close only when its
// context ends or Stop is called.
type resumingWatcher struct {
	updates chan jetstream.KeyValueEntry
	cancel  context.CancelFunc
}

func (w *resumingWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop ends the watch; its updates close soon after.
func (w *resumingWatcher) Stop() error {
	w.cancel()
	return nil
}

// resumeWatch opens a watch with open and opts, and returns it as a resumingWatcher. floor is a
// revision the watch is known to start after (a watch of updates only reads it before opening), so a
// watch of updates only that ends before its first entry resumes from there rather than from the
// present; 0 for a watch that starts with the bucket's values. fence, if not nil, reads the watch's
// fence (see resumer.mark).
func resumeWatch(ctx context.Context, bucket string, floor uint64, fence fenceFunc, open openWatch, opts []jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	// Every watch under it runs on the context whose end it checks: a first watch on the caller's could
	// close while the cancel is still on its way to this one, which would then open another.
	ctx, cancel := context.WithCancel(ctx)
	first, err := openFirst(ctx, bucket, open, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &resumingWatcher{updates: make(chan jetstream.KeyValueEntry, 256), cancel: cancel}
	r := &resumer{w: w, bucket: bucket, open: open, opts: slices.Clip(opts), last: floor, fence: fence}
	go r.run(ctx, first)
	return w, nil
}

// openFirst opens a resuming watch's first watch, asking again while JetStream gives no answer (a
// leader being chosen, a server cut off from its cluster), as a start does: a service whose first
// watch got none would otherwise exit, to be restarted into the same wait. An answered error, or ctx's
// end, is returned. The watch runs on ctx itself, not on the try's context, which ends with the try:
// nats.go bounds the open's own requests.
func openFirst(ctx context.Context, bucket string, open openWatch, opts []jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return retryUnanswered(ctx, "a watch of bucket "+bucket, 0, ResumePause, func(context.Context) (jetstream.KeyWatcher, error) {
		return open(ctx, opts...)
	})
}

// resumer is a resumingWatcher's goroutine state.
type resumer struct {
	w      *resumingWatcher
	bucket string
	open   openWatch
	opts   []jetstream.WatchOpt
	last   uint64 // the revision of the last entry passed on (or the floor)
	synced bool   // the nil entry was passed on

	fence     fenceFunc // nil: the nil entry is passed on as nats.go places it
	holding   bool      // the nil entry came and waits for the fence
	fenced    lastMsg   // the fence while holding
	heldSince time.Time
}

func (r *resumer) run(ctx context.Context, kw jetstream.KeyWatcher) {
	defer close(r.w.updates)
	for {
		r.forward(ctx, kw)
		_ = kw.Stop()
		if ctx.Err() != nil {
			return
		}
		if kw = r.reopen(ctx); kw == nil {
			return
		}
		slog.Warn("a bucket's watch ended; resumed it", "bucket", r.bucket, "after", r.last)
		metrics.Count("kv.watch_resumed."+r.bucket, 1)
	}
}

// forward passes on kw's entries until it closes or ctx ends.
func (r *resumer) forward(ctx context.Context, kw jetstream.KeyWatcher) {
	var recheck <-chan time.Time
	if r.holding {
		recheck = time.After(fenceRecheck)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-recheck:
			if !r.mark(ctx, true) {
				return
			}
			if recheck = nil; r.holding {
				recheck = time.After(fenceRecheck)
			}
		case e, ok := <-kw.Updates():
			switch {
			case !ok:
				return
			case e == nil:
				if r.synced || r.holding {
					continue // a resumed watch's own end of initial values
				}
				if !r.mark(ctx, false) {
					return
				}
				if r.holding {
					recheck = time.After(fenceRecheck)
				}
				continue
			case e.Revision() <= r.last:
				continue
			default:
				r.last = e.Revision()
			}
			if !r.send(ctx, e) {
				return
			}
			if r.holding && r.last >= r.fenced.seq {
				if !r.pass(ctx) {
					return
				}
				recheck = nil
			}
		}
	}
}

// mark passes on the nil entry, the end of the initial values, once the watch has passed on the fence:
// the last entry under its keys, read from the stream leader after nats.go's own nil entry. nats.go
// places that from the consumer's pending counts, which writes made meanwhile can move, so that it may
// come before the last values. Entries come in revision order, so the keys' values are then all in, as of
// the fence or later. Until then, mark holds the nil entry (holding), and is called again each
// fenceRecheck (again true): a fence read again only lowers it, so a watch does not chase new writes.
// The fence is asked for again while no server answers; if it is refused, the nil entry goes on as
// nats.go placed it. false: ctx ended.
func (r *resumer) mark(ctx context.Context, again bool) bool {
	if r.fence == nil {
		return r.pass(ctx)
	}
	f, err := r.fence(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		slog.Warn("reading a watch's fence failed; its end of initial values is nats.go's", "bucket", r.bucket, "err", err)
		metrics.Count("kv.watch_unfenced."+r.bucket, 1)
		return r.pass(ctx)
	case !again:
		r.fenced, r.heldSince = f, time.Now()
	case f.seq < r.fenced.seq:
		r.fenced = f
	}
	switch {
	case r.last >= r.fenced.seq:
		return r.pass(ctx)
	case again && r.fenced.deleted && time.Since(r.heldSince) >= fenceGiveUp:
		slog.Warn("a watch's fence is a delete it has not passed on; does it ignore deletes?", "bucket", r.bucket, "fence", r.fenced.seq, "last", r.last)
		metrics.Count("kv.watch_unfenced."+r.bucket, 1)
		return r.pass(ctx)
	}
	r.holding = true
	return true
}

// pass passes on the nil entry.
func (r *resumer) pass(ctx context.Context) bool {
	r.holding, r.synced = false, true
	return r.send(ctx, nil)
}

// send passes on one entry; false: ctx ended.
func (r *resumer) send(ctx context.Context, e jetstream.KeyValueEntry) bool {
	select {
	case r.w.updates <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

// reopen opens the next watch, from the revision after the last entry passed on (afresh when there
// was none), asking again every ResumePause until it opens; nil when ctx ends or the connection was
// closed, which ends the watch as it ends nats.go's.
func (r *resumer) reopen(ctx context.Context) jetstream.KeyWatcher {
	opts := r.opts
	if r.last > 0 {
		opts = append(opts, jetstream.ResumeFromRevision(r.last+1))
	}
	for {
		kw, err := r.open(ctx, opts...)
		if err == nil {
			return kw
		}
		if ctx.Err() != nil || errors.Is(err, nats.ErrConnectionClosed) {
			return nil
		}
		slog.Warn("resuming a bucket's watch failed; asking again", "bucket", r.bucket, "err", err)
		if !ctxtime.Sleep(ctx, ResumePause) {
			return nil
		}
	}
}
