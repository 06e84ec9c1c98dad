package admission

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/metrics"
)

// The watch cache keeps one kind's bucket in memory, as kube-apiserver's cacher keeps a resource, so that
// lists and watches never read the bucket:
//
//	bucket ──one KV watch──▶ watchCache ─┬─ objects: key ─▶ entry (stored bytes, labels, selectable fields)
//	                                    ├─ sorted: the entries in key order, immutable, rebuilt on demand
//	                                    │    (a paged list keeps the one it started on: its continue tokens)
//	                                    ├─ ring: the last changes (resourceVersion = KV revision)
//	                                    └─ watchers: a bounded channel each, fed from the ring
//
// Entries keep the stored form rather than the decoded object: lists and watches decode only what they
// send. A watcher that falls a channel behind is closed, and the client watches again from its last
// resourceVersion; one older than the ring is 410 Expired.

// Defaults of the watch cache.
const (
	// The ring keeps at least minCacheEvents changes, and grows up to maxCacheEvents to hold the last
	// eventFreshness of them, as kube-apiserver's does: watches resume and continue tokens stay valid
	// for that long under a burst of changes.
	minCacheEvents       = 1024
	maxCacheEvents       = 100 * 1024
	eventFreshness       = 75 * time.Second
	defaultBookmarkEvery = time.Minute // BOOKMARK events to watchers that allow them
	watcherBuffer        = 1024        // events a watcher may lag before it is closed
	maxListSnapshots     = 32          // paged lists whose continue tokens stay valid
	// freshWait bounds the wait for the cache to reach a resourceVersion the store already has.
	freshWait = 3 * time.Second
	// readyWait bounds the wait for the first read of a bucket.
	readyWait = time.Minute
)

// cacheEntry is one stored object. Entries are immutable once published; stale only tells the cache's
// own rebuild that a newer entry (or a deletion) replaced this one.
type cacheEntry struct {
	ns, name string
	id       string // ns/name (name alone when cluster-scoped): the key of objects
	key      string // KV key
	rev      uint64
	data     []byte
	labels   labels.Set
	// fields are the values of the kind's selectable fields, in watchCache.fieldNames order, read
	// through field: shared among entries (see sharedFields) but for those special marks.
	fields  []string
	special uint32 // two bits a field: fieldShared, fieldName, fieldNamespace or fieldOwn
	own     string // the kind's ownField
	stale   bool   // guarded by watchCache.mu
}

func compareEntries(a, b *cacheEntry) int {
	if c := strings.Compare(a.ns, b.ns); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// cacheEvent is one change: cur is nil for a deletion, prev nil for a creation.
type cacheEvent struct {
	rev       uint64
	at        int64 // when the cache saw it, in Unix nanoseconds
	cur, prev *cacheEntry
	// The event's object as JSON, encoded once for every watcher that sends it.
	once    sync.Once
	encoded []byte
	err     error
}

// object is the entry an event carries: the new state, or the last one of a deleted object.
func (ev *cacheEvent) object() *cacheEntry {
	if ev.cur != nil {
		return ev.cur
	}
	return ev.prev
}

// watchItem is an event as one watcher sees it.
type watchItem struct {
	ev  *cacheEvent
	typ string
}

const watchBookmark = "BOOKMARK"

// selection is what a list or watch asks for: a namespace ("" all), a name ("" any) and selectors.
type selection struct {
	ns, name string
	m        matcher
}

// cacheWatcher is one registered watch; the cache closes ch when it ends the watch.
type cacheWatcher struct {
	sel       selection
	bookmarks bool
	ch        chan watchItem
}

// listSnapshot is the key-ordered state at a resourceVersion, kept for the continue tokens of a paged list.
type listSnapshot struct {
	rv    uint64
	items []*cacheEntry
}

// watchCache caches one kind's bucket.
type watchCache struct {
	ki         *kind
	kv         jetstream.KeyValue // nil: fed directly (tests)
	minEvents  int
	maxEvents  int
	maxBytes   int // of the ring's events, beyond minEvents
	bookmarks  time.Duration
	fieldNames []string
	fieldIdx   map[string]int
	// sharedFields are the entries' field values (see setFields); fieldBuf is setFields' own. Both
	// belong to the goroutine that applies changes.
	sharedFields *intern.StringSlices
	fieldBuf     []string
	log          *slog.Logger

	ready     chan struct{} // closed after the first full read of the bucket
	readyOnce sync.Once
	decodes   atomic.Int64 // objects decoded by the cache itself (one per change), for tests

	mu        sync.Mutex
	objects   map[string]*cacheEntry
	idBuf     []byte        // apply's ns/name, to look an object up without a string per change
	sorted    []*cacheEntry // as of rv once pending is merged in
	pending   []*cacheEntry // entries added since sorted was built
	dirty     bool          // sorted misses changes: pending entries, or stale ones to drop
	rv        uint64
	oldest    uint64        // watches may start after any resourceVersion from here on
	ring      []*cacheEvent // circular: ring[head] is the oldest held
	head, n   int
	ringBytes int // eventCost of the held events
	watchers  map[*cacheWatcher]struct{}
	snapshots []listSnapshot
	changed   chan struct{} // closed and replaced whenever rv moves
}

// newWatchCache returns a cache of ki's bucket kv; events > 0 fixes the ring's size.
func newWatchCache(ki *kind, kv jetstream.KeyValue, events int, bookmarks time.Duration, log *slog.Logger) *watchCache {
	minEvents, maxEvents := minCacheEvents, maxCacheEvents
	if events > 0 {
		minEvents, maxEvents = events, events
	}
	if bookmarks <= 0 {
		bookmarks = defaultBookmarkEvery
	}
	c := &watchCache{
		ki: ki, kv: kv, minEvents: minEvents, maxEvents: maxEvents, maxBytes: maxCacheEventBytes, bookmarks: bookmarks, log: log,
		fieldIdx: map[string]int{}, sharedFields: intern.NewStringSlices(intern.DefaultLimit),
		ready:    make(chan struct{}),
		objects:  map[string]*cacheEntry{},
		ring:     make([]*cacheEvent, minEvents),
		watchers: map[*cacheWatcher]struct{}{},
		changed:  make(chan struct{}),
	}
	for f := range ki.fieldSet(ki.newObject()) {
		c.fieldNames = append(c.fieldNames, f)
	}
	slices.Sort(c.fieldNames)
	for i, f := range c.fieldNames {
		c.fieldIdx[f] = i
	}
	return c
}

// entryFields are an entry's selectable fields, as a field selector reads them.
type entryFields struct {
	idx map[string]int
	e   *cacheEntry
}

func (f entryFields) Has(k string) bool { _, ok := f.idx[k]; return ok }

func (f entryFields) Get(k string) string {
	if i, ok := f.idx[k]; ok {
		return f.e.field(i)
	}
	return ""
}

// matches tells whether e (nil: no object) is selected.
func (c *watchCache) matches(sel selection, e *cacheEntry) bool {
	if e == nil || sel.ns != "" && e.ns != sel.ns || sel.name != "" && e.name != sel.name {
		return false
	}
	if !sel.m.label.Empty() && !sel.m.label.Matches(e.labels) {
		return false
	}
	return sel.m.field.Empty() || sel.m.field.Matches(entryFields{c.fieldIdx, e})
}

// decode turns an entry into the API object, with resourceVersion rev.
func (c *watchCache) decode(e *cacheEntry, rev uint64) (runtime.Object, error) {
	return c.ki.decodeEntry(e.key, e.data, rev)
}

// run keeps the cache in step with the bucket until ctx ends, reading the bucket again from scratch
// should its watch end early.
func (c *watchCache) run(ctx context.Context) {
	tick := time.NewTicker(c.bookmarks)
	defer tick.Stop()
	defer c.closeWatchers()
	for ctx.Err() == nil {
		err := c.follow(ctx, tick.C)
		if ctx.Err() != nil {
			return
		}
		metrics.Count("admission.watchcache.restarts", 1)
		if err != nil {
			c.log.Warn("watch cache restarts", "resource", c.ki.resource, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// follow reads the bucket in full, publishes that state, then applies its changes as they come.
func (c *watchCache) follow(ctx context.Context, bookmark <-chan time.Time) error {
	last, err := bus.StoreRevision(ctx, c.kv)
	if err != nil {
		return err
	}
	w, err := c.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch bucket %s: %w", c.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	initial := newWatchCache(c.ki, nil, 1, time.Hour, c.log) // the state being read, published at the end
	synced := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-bookmark:
			if synced {
				c.bookmark()
			}
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return fmt.Errorf("watch of bucket %s ended", c.kv.Bucket())
			case e == nil:
				c.replace(initial, last)
				synced = true
			case synced:
				c.apply(e.Key(), e.Operation(), e.Value(), e.Revision())
			default:
				initial.apply(e.Key(), e.Operation(), e.Value(), e.Revision())
			}
		}
	}
}

// replace publishes a full read of the bucket at revision last (or later). Watchers of the previous state
// are closed: they watch again from their last resourceVersion, or relist.
func (c *watchCache) replace(from *watchCache, last uint64) {
	c.mu.Lock()
	c.closeWatchersLocked()
	c.objects, c.pending, c.sorted, c.dirty = from.objects, from.pending, from.sorted, true
	c.sharedFields = from.sharedFields
	c.rv = max(from.rv, last, c.rv)
	c.oldest = c.rv
	c.head, c.n, c.ringBytes = 0, 0, 0
	c.ring = make([]*cacheEvent, c.minEvents)
	c.snapshots = nil
	c.decodes.Add(from.decodes.Load())
	c.signalLocked()
	c.mu.Unlock()
	c.readyOnce.Do(func() { close(c.ready) })
}

// apply records one change of the bucket.
func (c *watchCache) apply(key string, op jetstream.KeyValueOp, value []byte, rev uint64) {
	var ns, name string
	ok := true
	if c.ki.namespaced {
		ns, name, ok = bus.SplitPodKey(key)
	} else {
		name, ok = bus.Untoken(key)
	}
	var cur *cacheEntry
	if ok && op == jetstream.KeyValuePut {
		cur = c.newEntry(key, ns, name, value, rev) // nil if it does not decode: then it is not listed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.signalLocked()
	c.rv = max(c.rv, rev)
	if !ok {
		return
	}
	// An object keeps the id of its first version: a change looks it up in a buffer, so that only a new
	// object allocates one.
	id := name
	var prev *cacheEntry
	if c.ki.namespaced {
		c.idBuf = append(append(append(c.idBuf[:0], ns...), '/'), name...)
		if prev = c.objects[string(c.idBuf)]; prev != nil {
			id = prev.id
		} else {
			id = string(c.idBuf)
		}
	} else {
		prev = c.objects[id]
	}
	if prev == nil && cur == nil {
		return // deleting what was never there: no event, as etcd's watch gives none
	}
	c.dirty = true
	if prev != nil {
		prev.stale = true
		delete(c.objects, id)
	}
	if cur != nil {
		cur.id = id
		c.objects[id] = cur
		c.pending = append(c.pending, cur)
		// A cache that nobody lists merges now and then all the same: pending keeps every version it
		// was given, replaced ones too, until the next merge.
		if len(c.pending) > max(c.minEvents, len(c.objects)/2) {
			c.sortedLocked()
		}
	}
	ev := &cacheEvent{rev: rev, at: time.Now().UnixNano(), cur: cur, prev: prev}
	c.pushLocked(ev)
	for w := range c.watchers {
		if typ := c.eventType(w.sel, ev); typ != "" {
			c.sendLocked(w, watchItem{ev: ev, typ: typ})
		}
	}
}

// newEntry decodes a stored value once, for the labels and fields selectors read; nil if it does not
// decode.
func (c *watchCache) newEntry(key, ns, name string, value []byte, rev uint64) *cacheEntry {
	c.decodes.Add(1)
	var lbls map[string]string
	var fs fields.Set
	if index := c.ki.storage.index; index != nil {
		var err error
		if lbls, fs, err = index(value); err != nil {
			metrics.Count("admission.watchcache.malformed", 1)
			return nil
		}
	} else {
		o, err := c.ki.decodeEntry(key, value, rev)
		if err != nil {
			metrics.Count("admission.watchcache.malformed", 1)
			return nil
		}
		lbls, fs = objectMeta(o).Labels, c.ki.fieldSet(o)
	}
	// The entry keeps its own copy of the value, not a part of the message that brought it, and shares
	// label sets and the fields' values that repeat across objects.
	e := &cacheEntry{ns: ns, name: name, key: key, rev: rev, data: bytes.Clone(value), labels: internLabels(lbls)}
	c.setFields(e, fs)
	return e
}

// The marks of cacheEntry.special.
const (
	fieldShared = iota
	fieldName
	fieldNamespace
	fieldOwn
)

// maxSharedFields is the most fields whose marks fit cacheEntry.special.
const maxSharedFields = 16

// setFields keeps fs in e: the name, the namespace and the kind's ownField in the entry, the other
// values in a slice shared with the entries that have the same (the pods of a node in one phase),
// when the kind has an ownField.
func (c *watchCache) setFields(e *cacheEntry, fs fields.Set) {
	share := c.ki.ownField != "" && len(c.fieldNames) <= maxSharedFields
	vals := c.fieldBuf[:0]
	for i, f := range c.fieldNames {
		v, mark := fs[f], fieldShared
		switch {
		case v == e.name:
			v, mark = e.name, fieldName
		case v == e.ns:
			v, mark = e.ns, fieldNamespace
		case f == c.ki.ownField:
			v, mark = strings.Clone(v), fieldOwn
		default:
			v = intern.String(v)
		}
		if share && mark != fieldShared {
			e.special |= uint32(mark) << (2 * i)
			if mark == fieldOwn {
				e.own = v
			}
			v = ""
		}
		vals = append(vals, v)
	}
	c.fieldBuf = vals
	if !share {
		e.fields = slices.Clone(vals)
		return
	}
	e.fields = c.sharedFields.Get(vals)
}

// field is the value of the i-th of the kind's selectable fields.
func (e *cacheEntry) field(i int) string {
	switch e.special >> (2 * i) & 3 {
	case fieldName:
		return e.name
	case fieldNamespace:
		return e.ns
	case fieldOwn:
		return e.own
	}
	return e.fields[i]
}

// eventType is the type of ev for a watcher selecting sel, "" if it does not see it: an object that
// starts or stops matching is ADDED or DELETED for it, as kube-apiserver's cache watchers do.
func (c *watchCache) eventType(sel selection, ev *cacheEvent) string {
	cur, prev := c.matches(sel, ev.cur), c.matches(sel, ev.prev)
	switch {
	case cur && prev:
		return watchModified
	case cur:
		return watchAdded
	case prev:
		return watchDeleted
	}
	return ""
}

// pushLocked adds ev to the ring: the ring grows while its oldest event is fresh and its events fit in
// maxBytes, else drops it; events past their freshness or the budget go beyond the minimum.
func (c *watchCache) pushLocked(ev *cacheEvent) {
	cost := eventCost(ev)
	for c.n > c.minEvents && (ev.at-c.ring[c.head].at > int64(eventFreshness) || c.ringBytes+cost > c.maxBytes) {
		c.dropOldestLocked()
	}
	if c.n == len(c.ring) {
		fresh := ev.at-c.ring[c.head].at <= int64(eventFreshness) && c.ringBytes+cost <= c.maxBytes
		if fresh && len(c.ring) < c.maxEvents {
			grown := make([]*cacheEvent, min(2*len(c.ring), c.maxEvents))
			for i := range c.n {
				grown[i] = c.ring[(c.head+i)%len(c.ring)]
			}
			c.ring, c.head = grown, 0
		} else {
			c.dropOldestLocked()
		}
	}
	c.ring[(c.head+c.n)%len(c.ring)] = ev
	c.n++
	c.ringBytes += cost
}

func (c *watchCache) dropOldestLocked() {
	c.oldest = c.ring[c.head].rev
	c.ringBytes -= eventCost(c.ring[c.head])
	c.ring[c.head] = nil
	c.head = (c.head + 1) % len(c.ring)
	c.n--
	c.snapshots = slices.DeleteFunc(c.snapshots, func(s listSnapshot) bool { return s.rv < c.oldest })
}

// sendLocked queues an item for w, or ends a watch that fell too far behind.
func (c *watchCache) sendLocked(w *cacheWatcher, it watchItem) {
	select {
	case w.ch <- it:
	default:
		metrics.Count("admission.watchcache.slow_watchers", 1)
		c.stopLocked(w)
	}
}

func (c *watchCache) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// bookmark queues a BOOKMARK at the current resourceVersion for the watchers that allow them; one that
// has no room for it gets it next time.
func (c *watchCache) bookmark() {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev := &cacheEvent{rev: c.rv}
	for w := range c.watchers {
		if w.bookmarks {
			select {
			case w.ch <- watchItem{ev: ev, typ: watchBookmark}:
			default:
			}
		}
	}
}

func (c *watchCache) stopLocked(w *cacheWatcher) {
	if _, ok := c.watchers[w]; ok {
		delete(c.watchers, w)
		close(w.ch)
	}
}

// stop ends a watch.
func (c *watchCache) stop(w *cacheWatcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked(w)
}

func (c *watchCache) closeWatchers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeWatchersLocked()
}

func (c *watchCache) closeWatchersLocked() {
	for w := range c.watchers {
		c.stopLocked(w)
	}
}

// sortedLocked merges the entries added since the last call into the key-ordered state.
func (c *watchCache) sortedLocked() []*cacheEntry {
	if !c.dirty && c.sorted != nil {
		return c.sorted
	}
	added := slices.DeleteFunc(c.pending, func(e *cacheEntry) bool { return e.stale })
	slices.SortFunc(added, compareEntries)
	out := make([]*cacheEntry, 0, len(c.objects))
	i := 0
	for _, e := range c.sorted {
		if e.stale {
			continue
		}
		for ; i < len(added) && compareEntries(added[i], e) < 0; i++ {
			out = append(out, added[i])
		}
		out = append(out, e)
	}
	out = append(out, added[i:]...)
	c.sorted, c.pending, c.dirty = out, nil, false
	return out
}

// Errors of the watch cache.
var (
	// errNotFresh: the cache did not reach the wanted resourceVersion in time.
	errNotFresh = errors.New("watch cache is behind the store")
)

// waitReady waits for the first full read of the bucket, at most readyWait.
func (c *watchCache) waitReady(ctx context.Context) error {
	timer := time.NewTimer(readyWait)
	defer timer.Stop()
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("%w: not ready", errNotFresh)
	}
}

// get returns the object with id (ns/name, or name when cluster-scoped) as the cache holds it, or
// nil when it holds none.
func (c *watchCache) get(id string) (runtime.Object, error) {
	c.mu.Lock()
	e := c.objects[id]
	c.mu.Unlock()
	if e == nil {
		return nil, nil
	}
	return c.decode(e, e.rev)
}

// field returns the selectable field name of the object id holds, without decoding it; false when the
// cache does not hold id or the kind has no such field.
func (c *watchCache) field(id, name string) (string, bool) {
	i, ok := c.fieldIdx[name]
	if !ok {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.objects[id]
	if e == nil {
		return "", false
	}
	return e.field(i), true
}

func (c *watchCache) isReady() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// waitFor waits until the cache has seen resourceVersion rv, at most freshWait.
func (c *watchCache) waitFor(ctx context.Context, rv uint64) error {
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	timer := time.NewTimer(freshWait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		cur, ch := c.rv, c.changed
		c.mu.Unlock()
		if cur >= rv {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("%w: at %d, want %d", errNotFresh, cur, rv)
		}
	}
}

// fresh waits until the cache holds what the store holds now, for a consistent read.
func (c *watchCache) fresh(ctx context.Context) error {
	if c.kv == nil {
		return c.waitReady(ctx)
	}
	last, err := bus.StoreRevision(ctx, c.kv)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, last)
}

// atLeast waits for resourceVersion rv, refusing one the store has not reached (504, as kube does).
func (c *watchCache) atLeast(ctx context.Context, rv uint64) error {
	if c.kv != nil {
		last, err := bus.StoreRevision(ctx, c.kv)
		if err != nil {
			return err
		}
		if rv > last {
			return tooLarge(rv, last)
		}
	}
	if err := c.waitFor(ctx, rv); err != nil {
		if errors.Is(err, errNotFresh) {
			return tooLarge(rv, c.currentRV())
		}
		return err
	}
	return nil
}

func tooLarge(rv, cur uint64) error {
	return apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", rv, cur), 1)
}

func (c *watchCache) currentRV() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rv
}

// len is the number of cached objects.
func (c *watchCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.objects)
}

// watcherCount is the number of registered watchers.
func (c *watchCache) watcherCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.watchers)
}

// state returns the current key-ordered entries and their resourceVersion.
func (c *watchCache) state() ([]*cacheEntry, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sortedLocked(), c.rv
}

// keep records the state at rv for the continue tokens of a paged list, while the ring still reaches it.
func (c *watchCache) keep(rv uint64, items []*cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv < c.oldest || slices.ContainsFunc(c.snapshots, func(s listSnapshot) bool { return s.rv == rv }) {
		return
	}
	if len(c.snapshots) == maxListSnapshots {
		c.snapshots = slices.Delete(c.snapshots, 0, 1)
	}
	c.snapshots = append(c.snapshots, listSnapshot{rv: rv, items: items})
}

// stateAt returns the key-ordered entries at resourceVersion rv, if the cache still has them.
func (c *watchCache) stateAt(rv uint64) ([]*cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv == c.rv {
		return c.sortedLocked(), true
	}
	for _, s := range c.snapshots {
		if s.rv == rv {
			return s.items, true
		}
	}
	return nil, false
}

// register adds a watcher of sel. With initial, it returns the current state (the watch starts with
// it, as ADDED events); otherwise the held changes after resourceVersion from, or 410 Expired when the
// ring no longer holds them all.
func (c *watchCache) register(sel selection, from uint64, initial, bookmarks bool) (*cacheWatcher, []*cacheEntry, []watchItem, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &cacheWatcher{sel: sel, bookmarks: bookmarks, ch: make(chan watchItem, watcherBuffer)}
	var state []*cacheEntry
	var backlog []watchItem
	if initial {
		state = c.sortedLocked()
	} else {
		if from < c.oldest {
			return nil, nil, nil, 0, expired(from, c.oldest+1)
		}
		for i := range c.n {
			ev := c.ring[(c.head+i)%len(c.ring)]
			if ev.rev <= from {
				continue
			}
			if typ := c.eventType(sel, ev); typ != "" {
				backlog = append(backlog, watchItem{ev: ev, typ: typ})
			}
		}
	}
	c.watchers[w] = struct{}{}
	return w, state, backlog, c.rv, nil
}

// span is the part of key-ordered entries a selection may match: one object's place when it names one,
// else its namespace's, or all.
func (c *watchCache) span(items []*cacheEntry, sel selection) (lo, hi int) {
	if sel.name != "" && (sel.ns != "" || !c.ki.namespaced) {
		k := &cacheEntry{ns: sel.ns, name: sel.name}
		lo = sort.Search(len(items), func(i int) bool { return compareEntries(items[i], k) >= 0 })
		return lo, min(lo+1, len(items))
	}
	if sel.ns == "" || !c.ki.namespaced {
		return 0, len(items)
	}
	lo = sort.Search(len(items), func(i int) bool { return items[i].ns >= sel.ns })
	hi = lo + sort.Search(len(items)-lo, func(i int) bool { return items[lo+i].ns > sel.ns })
	return lo, hi
}

// after is the index of the first of items after the entry ns/name.
func after(items []*cacheEntry, ns, name string) int {
	k := &cacheEntry{ns: ns, name: name}
	return sort.Search(len(items), func(i int) bool { return compareEntries(items[i], k) > 0 })
}
