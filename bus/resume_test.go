package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// cutWatcher passes on n entries of a real watch, then ends as a watch does when nats.go gives its
// ordered consumer up: it stops the watch and closes its updates.
type cutWatcher struct {
	updates chan jetstream.KeyValueEntry
	stop    context.CancelFunc
}

func (c *cutWatcher) Updates() <-chan jetstream.KeyValueEntry { return c.updates }
func (c *cutWatcher) Stop() error                             { c.stop(); return nil }

func cut(ctx context.Context, kw jetstream.KeyWatcher, n int) *cutWatcher {
	ctx, cancel := context.WithCancel(ctx)
	c := &cutWatcher{updates: make(chan jetstream.KeyValueEntry), stop: cancel}
	go func() {
		defer close(c.updates)
		defer func() { _ = kw.Stop() }()
		for i := 0; i < n; i++ {
			select {
			case e, ok := <-kw.Updates():
				if !ok {
					return
				}
				select {
				case c.updates <- e:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return c
}

// describe is an entry as the tests expect it: "nil", "key", or "-key" for a delete.
func describe(e jetstream.KeyValueEntry) string {
	switch {
	case e == nil:
		return "nil"
	case e.Operation() != jetstream.KeyValuePut:
		return "-" + e.Key()
	}
	return e.Key()
}

// A watch whose consumer is given up resumes after the last entry it passed on: the caller sees what
// one unbroken watch opened at the resumption would show, its nil once and no entry twice, and the
// changes made while no watch ran.
func TestWatchResumesWhereItEnded(t *testing.T) {
	tests := []struct {
		name        string
		updatesOnly bool
		cutAfter    int      // entries the first watch passes on before it ends
		before      []string // what the caller sees of the first watch
		after       []string // then, of the resumed one (the gap's writes: put c, delete a)
	}{
		{"after the initial values", false, 3, []string{"a", "b", "nil"}, []string{"c", "-a"}},
		{"during the initial values", false, 1, []string{"a"}, []string{"b", "c", "-a", "nil"}},
		{"before any entry", false, 0, nil, []string{"b", "c", "-a", "nil"}},
		{"updates only, before any", true, 0, nil, []string{"c", "-a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHubTest(t, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, k := range []string{"a", "b"} {
				if _, err := h.kv.Put(ctx, k, []byte(k)); err != nil {
					t.Fatal(err)
				}
			}
			gap := make(chan struct{})
			opens := 0
			open := func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
				opens++
				if opens == 2 {
					<-gap // the test writes while no watch runs
				}
				kw, err := h.kv.WatchAll(ctx, opts...)
				if err != nil || opens > 1 {
					return kw, err
				}
				return cut(ctx, kw, tt.cutAfter), nil
			}
			var w jetstream.KeyWatcher
			var err error
			if tt.updatesOnly {
				w, err = resumeUpdates(ctx, h.kv, open, nil)
			} else {
				w, err = resumeWatch(ctx, "w", 0, nil, open, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Stop() }()
			next := func() string {
				select {
				case e, ok := <-w.Updates():
					if !ok {
						t.Fatal("updates closed")
					}
					return describe(e)
				case <-ctx.Done():
					t.Fatal("no entry in time")
				}
				return ""
			}
			var got []string
			for range tt.before {
				got = append(got, next())
			}
			if !slices.Equal(got, tt.before) {
				t.Fatalf("first watch: %v, want %v", got, tt.before)
			}
			if _, err := h.kv.Put(ctx, "c", []byte("c")); err != nil {
				t.Fatal(err)
			}
			if err := h.kv.Delete(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			close(gap)
			got = nil
			for range tt.after {
				got = append(got, next())
			}
			if !slices.Equal(got, tt.after) {
				t.Fatalf("resumed watch: %v, want %v", got, tt.after)
			}
			if _, err := h.kv.Put(ctx, "d", []byte("d")); err != nil {
				t.Fatal(err)
			}
			if e := next(); e != "d" {
				t.Errorf("live change: %s, want d", e)
			}
			if opens != 2 {
				t.Errorf("%d watches opened, want 2", opens)
			}
		})
	}
}

// Stop ends a resuming watch: its updates close, it opens no other, and the watch under it ran on a
// context that Stop ended (one that ends later, the caller's, would let the watch under it close
// before the resuming watch sees its own end, and open another).
func TestResumingWatchStops(t *testing.T) {
	h := newHubTest(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opens := 0
	var under context.Context
	open := func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		opens++
		under = ctx
		return h.kv.WatchAll(ctx, opts...)
	}
	w, err := resumeWatch(ctx, "w", 0, nil, open, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := <-w.Updates(); e != nil {
		t.Fatalf("first entry of an empty bucket: %s, want nil", describe(e))
	}
	_ = w.Stop()
	for e := range w.Updates() {
		t.Errorf("entry after Stop: %s", describe(e))
	}
	if opens != 1 {
		t.Errorf("%d watches opened, want 1", opens)
	}
	if under.Err() == nil {
		t.Error("the watch under it still runs on a live context")
	}
}

// A resuming watch asks again while its next watch cannot be opened, and ends when the connection
// is closed.
func TestResumingWatchEndsWithTheConnection(t *testing.T) {
	h := newHubTest(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opens := 0
	open := func(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
		opens++
		switch opens {
		case 1:
			kw, err := h.kv.WatchAll(ctx, opts...)
			return cut(ctx, kw, 1), err
		case 2:
			return nil, fmt.Errorf("consumer create: %w", jetstream.ErrJetStreamNotEnabled)
		}
		h.c.NC.Close()
		return h.kv.WatchAll(ctx, opts...)
	}
	w, err := resumeWatch(ctx, "w", 0, nil, open, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range w.Updates() {
	}
	if ctx.Err() != nil {
		t.Fatal("updates did not close")
	}
	if opens != 3 {
		t.Errorf("%d opens, want 3", opens)
	}
}

// scriptWatcher delivers entries, then nothing.
type scriptWatcher struct{ updates chan jetstream.KeyValueEntry }

func (w scriptWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w scriptWatcher) Stop() error                             { return nil }

type scriptEntry struct {
	key string
	rev uint64
	op  jetstream.KeyValueOp
}

func (e scriptEntry) Bucket() string                  { return "w" }
func (e scriptEntry) Key() string                     { return e.key }
func (e scriptEntry) Value() []byte                   { return nil }
func (e scriptEntry) Revision() uint64                { return e.rev }
func (e scriptEntry) Created() time.Time              { return time.Time{} }
func (e scriptEntry) Delta() uint64                   { return 0 }
func (e scriptEntry) Operation() jetstream.KeyValueOp { return e.op }

// A watch passes on its nil entry once it has passed on its fence, the last entry under its keys read
// after nats.go's nil entry, wherever nats.go placed that: before the last values, it is held for them.
// A fence read again only lowers it (its entry removed by its age); a fence that is a delete the watch
// does not pass on (jetstream.IgnoreDeletes) is given up; a fence that cannot be read leaves nats.go's
// nil entry where it was.
func TestWatchMarksAtItsFence(t *testing.T) {
	put := func(k string, rev uint64) jetstream.KeyValueEntry { return scriptEntry{k, rev, jetstream.KeyValuePut} }
	type fenceRead struct {
		seq     uint64
		deleted bool
		err     error
	}
	tests := []struct {
		name    string
		entries []jetstream.KeyValueEntry
		fences  []fenceRead // one per read, the last repeated
		want    []string
	}{
		{"in place", []jetstream.KeyValueEntry{put("a", 1), put("b", 2), nil, put("c", 3)}, []fenceRead{{seq: 2}},
			[]string{"a", "b", "nil", "c"}},
		{"before the last values", []jetstream.KeyValueEntry{put("a", 1), nil, put("b", 2), put("c", 3)}, []fenceRead{{seq: 2}},
			[]string{"a", "b", "nil", "c"}},
		{"before a delete", []jetstream.KeyValueEntry{put("a", 1), nil, scriptEntry{"a", 2, jetstream.KeyValueDelete}}, []fenceRead{{seq: 2, deleted: true}},
			[]string{"a", "-a", "nil"}},
		{"an empty bucket", []jetstream.KeyValueEntry{nil, put("a", 1)}, []fenceRead{{}}, []string{"nil", "a"}},
		{"the fenced entry removed", []jetstream.KeyValueEntry{put("a", 1), nil}, []fenceRead{{seq: 5}, {seq: 9}, {seq: 1}},
			[]string{"a", "nil"}},
		{"a delete not passed on", []jetstream.KeyValueEntry{put("a", 1), nil}, []fenceRead{{seq: 2, deleted: true}},
			[]string{"a", "nil"}},
		{"no fence", []jetstream.KeyValueEntry{put("a", 1), nil, put("b", 2)}, []fenceRead{{err: errors.New("permissions violation")}},
			[]string{"a", "nil", "b"}},
	}
	defer func(r, g time.Duration) { fenceRecheck, fenceGiveUp = r, g }(fenceRecheck, fenceGiveUp)
	fenceRecheck, fenceGiveUp = 20*time.Millisecond, 200*time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			open := func(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
				w := scriptWatcher{updates: make(chan jetstream.KeyValueEntry, len(tt.entries))}
				for _, e := range tt.entries {
					w.updates <- e
				}
				return w, nil
			}
			reads := 0
			fence := func(context.Context) (lastMsg, error) {
				f := tt.fences[min(reads, len(tt.fences)-1)]
				reads++
				return lastMsg{seq: f.seq, deleted: f.deleted}, f.err
			}
			w, err := resumeWatch(ctx, "w", 0, fence, open, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Stop() }()
			var got []string
			for range tt.want {
				select {
				case e := <-w.Updates():
					got = append(got, describe(e))
				case <-ctx.Done():
					t.Fatalf("got %v, then nothing; want %v", got, tt.want)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// A watch's first open waits out JetStream giving no answer, as a start does, and returns an answered
// error at once.
func TestWatchOpenWaitsOutNoAnswer(t *testing.T) {
	tests := []struct {
		name  string
		errs  []error // the opens' errors before one succeeds
		want  error
		opens int
	}{
		{"no answer twice", []error{nats.ErrTimeout, &jetstream.APIError{Code: 503, ErrorCode: 10008}}, nil, 3},
		{"refused", []error{jetstream.ErrBucketNotFound}, jetstream.ErrBucketNotFound, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			opens := 0
			open := func(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
				opens++
				if opens <= len(tt.errs) {
					return nil, tt.errs[opens-1]
				}
				w := scriptWatcher{updates: make(chan jetstream.KeyValueEntry, 1)}
				w.updates <- nil
				return w, nil
			}
			w, err := resumeWatch(ctx, "w", 0, nil, open, nil)
			if !errors.Is(err, tt.want) || opens != tt.opens {
				t.Fatalf("open = %v after %d opens, want %v after %d", err, opens, tt.want, tt.opens)
			}
			if err != nil {
				return
			}
			defer func() { _ = w.Stop() }()
			if e := <-w.Updates(); e != nil {
				t.Errorf("first entry %v, want the end of the initial values", describe(e))
			}
		})
	}
}
