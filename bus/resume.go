package bus

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/internal/ctxtime"
	"github.com/podbus/podbus/internal/metrics"
)

// WatchAll, Watch and WatchFiltered are nats.go's, with watches that resume (see resumingWatcher).
func (b *Bucket) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return resumeWatch(ctx, b.Bucket(), 0, func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		return b.KeyValue.WatchAll(ctx, opts...)
	}, opts)
}

// Watch is WatchAll of the keys matching keys.
func (b *Bucket) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return resumeWatch(ctx, b.Bucket(), 0, func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		return b.KeyValue.Watch(ctx, keys, opts...)
	}, opts)
}

// WatchFiltered is WatchAll of the keys matching any of keys.
func (b *Bucket) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return resumeWatch(ctx, b.Bucket(), 0, func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
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
	return resumeWatch(ctx, kv.Bucket(), floor, open, append(slices.Clip(opts), jetstream.UpdatesOnly()))
}

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
// present; 0 for a watch that starts with the bucket's values.
func resumeWatch(ctx context.Context, bucket string, floor uint64, open openWatch, opts []jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	// Every watch under it runs on the context whose end it checks: a first watch on the caller's could
	// close while the cancel is still on its way to this one, which would then open another.
	ctx, cancel := context.WithCancel(ctx)
	first, err := open(ctx, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &resumingWatcher{updates: make(chan jetstream.KeyValueEntry, 256), cancel: cancel}
	r := &resumer{w: w, bucket: bucket, open: open, opts: slices.Clip(opts), last: floor}
	go r.run(ctx, first)
	return w, nil
}

// resumer is a resumingWatcher's goroutine state.
type resumer struct {
	w      *resumingWatcher
	bucket string
	open   openWatch
	opts   []jetstream.WatchOpt
	last   uint64 // the revision of the last entry passed on (or the floor)
	synced bool   // the nil entry was passed on
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
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-kw.Updates():
			switch {
			case !ok:
				return
			case e == nil:
				if r.synced {
					continue // a resumed watch's own end of initial values
				}
				r.synced = true
			case e.Revision() <= r.last:
				continue
			default:
				r.last = e.Revision()
			}
			select {
			case r.w.updates <- e:
			case <-ctx.Done():
				return
			}
		}
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
