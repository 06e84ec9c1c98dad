package workloads

import (
	"context"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

type rsEntry struct {
	obj      *appsv1.ReplicaSet
	template *pb.Pod
	rev      uint64
}

type dEntry struct {
	obj      *appsv1.Deployment
	template *pb.Pod
	rev      uint64
}

// podEntry is a cached pod as the controllers read it, and the pods-bucket revision it was read at.
type podEntry struct {
	pod *pb.Pod
	rev uint64
}

// cache holds the watched buckets. Entries are replaced, never modified, so a reader may keep one
// after unlocking.
type cache struct {
	mu   sync.Mutex
	pods map[string]map[string]*cachedPod // ns -> name -> pod
	// byOwner indexes pods by their controller's uid, orphans by namespace ("orphan/<ns>"), so a sync
	// reads its own pods, not its namespace's.
	byOwner map[string]map[string]*cachedPod
	rs      map[string]*rsEntry // ns/name
	deploys map[string]*dEntry  // ns/name
	// podsRev is the highest pods-bucket revision the cache has applied.
	podsRev uint64
	// rsRev is the highest replicasets-bucket revision the cache has seen, malformed records included;
	// rsNS the same for each namespace's keys.
	rsRev uint64
	rsNS  map[string]uint64
}

func newCache() *cache {
	return &cache{pods: map[string]map[string]*cachedPod{}, byOwner: map[string]map[string]*cachedPod{}, rs: map[string]*rsEntry{}, deploys: map[string]*dEntry{},
		rsNS: map[string]uint64{}}
}

// setPod records a pod read at revision rev (nil: deleted), not cached yet, and returns the pod it
// replaces.
func (c *cache) setPod(key, ns string, p *cachedPod, rev uint64) *cachedPod {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.podsRev {
		c.podsRev = rev
	}
	name := key[len(ns)+1:]
	if p != nil && p.name() == name {
		name = p.name() // the key, sharing the pod's allocation
	}
	m := c.pods[ns]
	old := m[name]
	if old != nil {
		delete(c.byOwner[ownerIndex(ns, old)], name)
	}
	if p == nil {
		delete(m, name)
		return old
	}
	if m == nil {
		m = map[string]*cachedPod{}
		c.pods[ns] = m
	}
	p.rev = rev
	m[name] = p
	idx := ownerIndex(ns, p)
	if c.byOwner[idx] == nil {
		c.byOwner[idx] = map[string]*cachedPod{}
	}
	c.byOwner[idx][name] = p
	return old
}

// ownerIndex is a pod's key in byOwner. A controller uid names one object in the whole cluster.
func ownerIndex(ns string, p *cachedPod) string {
	if ref := p.controllerRef(); ref != nil {
		return ref.uid
	}
	return "orphan/" + ns
}

// podsFor returns the pods the owner uid controls, and with orphans the orphans of ns; and the pods
// revision the cache is at.
func (c *cache) podsFor(ns, uid string, orphans bool) ([]podEntry, uint64) {
	c.mu.Lock()
	cached := make([]*cachedPod, 0, len(c.byOwner[uid]))
	for _, p := range c.byOwner[uid] {
		cached = append(cached, p)
	}
	if orphans {
		for _, p := range c.byOwner["orphan/"+ns] {
			cached = append(cached, p)
		}
	}
	rev := c.podsRev
	c.mu.Unlock()
	out := make([]podEntry, len(cached))
	for i, p := range cached {
		out[i] = podEntry{pod: p.pod(), rev: p.rev}
	}
	return out, rev
}

// hasPod reports whether a pod of that name exists in ns.
func (c *cache) hasPod(ns, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pods[ns][name]
	return ok
}

// sawRS records that the replicasets watch has delivered revision rev, a key of ns ("": a key that
// names none).
func (c *cache) sawRS(ns string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rsRev = max(c.rsRev, rev)
	if ns != "" {
		c.rsNS[ns] = max(c.rsNS[ns], rev)
	}
}

func (c *cache) rsRevision() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rsRev
}

func (c *cache) setRS(key string, r *rsEntry) *rsEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.rs[key]
	if r == nil {
		delete(c.rs, key)
	} else {
		c.rs[key] = r
	}
	return old
}

func (c *cache) setDeployment(key string, d *dEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d == nil {
		delete(c.deploys, key)
	} else {
		c.deploys[key] = d
	}
}

// replicaSetsOf returns the ReplicaSets of ns, and the last revision of ns's keys the cache has seen.
func (c *cache) replicaSetsOf(ns string) ([]*rsEntry, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*rsEntry
	for _, r := range c.rs {
		if r.obj.Namespace == ns {
			out = append(out, r)
		}
	}
	return out, c.rsNS[ns]
}

// revisionsOf returns the revisions of the ReplicaSets of ns that counts says count, by name.
func (c *cache) revisionsOf(ns string, counts func(*appsv1.ReplicaSet) bool) map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]uint64{}
	for _, r := range c.rs {
		if r.obj.Namespace == ns && counts(r.obj) {
			out[r.obj.Name] = r.rev
		}
	}
	return out
}

// queue is a work queue of keys: a key queued while it is being worked on is worked on again after,
// never by two workers at once.
type queue struct {
	mu         sync.Mutex
	pending    []string
	queued     map[string]bool
	processing map[string]bool
	dirty      map[string]bool
	soon       map[string]bool
	wake       chan struct{}
	closed     bool
}

func newQueue() *queue {
	return &queue{queued: map[string]bool{}, processing: map[string]bool{}, dirty: map[string]bool{}, wake: make(chan struct{}, 1)}
}

func (q *queue) add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.processing[key] {
		q.dirty[key] = true
		return
	}
	if q.queued[key] {
		return
	}
	q.queued[key] = true
	q.pending = append(q.pending, key)
	q.signal()
}

// addSoon queues key at the next flush: a burst of pod changes syncs their owner once.
func (q *queue) addSoon(key string) {
	q.mu.Lock()
	if q.soon == nil {
		q.soon = map[string]bool{}
	}
	q.soon[key] = true
	q.mu.Unlock()
}

// flush queues what addSoon collected.
func (q *queue) flush() {
	q.mu.Lock()
	soon := q.soon
	q.soon = nil
	q.mu.Unlock()
	for k := range soon {
		q.add(k)
	}
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// addAfter queues key after d, unless ctx ends first.
func (q *queue) addAfter(ctx context.Context, key string, d time.Duration) {
	t := time.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
			q.add(key)
		}
	}()
}

// get blocks until a key is ready or ctx ends.
func (q *queue) get(ctx context.Context) (string, bool) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return "", false
		}
		if len(q.pending) > 0 {
			key := q.pending[0]
			q.pending = q.pending[1:]
			delete(q.queued, key)
			q.processing[key] = true
			if len(q.pending) > 0 {
				q.signal()
			}
			q.mu.Unlock()
			return key, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", false
		case <-q.wake:
		}
	}
}

func (q *queue) done(key string) {
	q.mu.Lock()
	delete(q.processing, key)
	again := q.dirty[key]
	delete(q.dirty, key)
	q.mu.Unlock()
	if again {
		q.add(key)
	}
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}
