package workloads

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/podutil"
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

// podMask is what the controllers read of a pod: the cache keeps only that of every pod of the
// cluster (see decodePod). A field read from a cached pod must be named here, and varied in
// TestPodMaskKeepsWhatControllersRead; what needs the whole pod (setController) reads it from the
// bucket.
var podMask = bus.NewMask(&pb.Pod{},
	"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.owner_references",
	"metadata.creation_timestamp", "metadata.deletion_timestamp",
	"spec.node_name",
	"status.phase", "status.conditions.type", "status.conditions.status", "status.conditions.last_transition_time",
	"status.container_statuses.restart_count",
	"internal.correlation_id")

// decodePod is a pods-bucket value as the cache keeps it: podMask's fields, and of the conditions only
// the first Ready one, the one podutil.PodCondition finds. False when the value is malformed.
func decodePod(data []byte) (*pb.Pod, bool) {
	pruned, ok := bus.Prune(data, podMask)
	p := &pb.Pod{}
	if !ok || proto.Unmarshal(pruned, p) != nil {
		return nil, false
	}
	// Shared with the other pods of the ReplicaSet and node: cached pods are never changed.
	if md := p.GetMetadata(); md != nil {
		md.Labels, md.Namespace = intern.Labels(md.Labels), intern.String(md.Namespace)
	}
	if sp := p.GetSpec(); sp != nil {
		sp.NodeName = intern.String(sp.NodeName)
	}
	if st := p.GetStatus(); st != nil {
		ready := podutil.PodCondition(p, "Ready")
		st.Conditions = nil
		if ready != nil {
			st.Conditions = []*pb.PodCondition{ready}
		}
	}
	return p, true
}

// podEntry is a pod as decodePod keeps it, and the pods-bucket revision it was read at.
type podEntry struct {
	pod *pb.Pod
	rev uint64
}

// cache holds the watched buckets. Entries are replaced, never modified, so a reader may keep one
// after unlocking.
type cache struct {
	mu   sync.Mutex
	pods map[string]map[string]podEntry // ns -> name -> pod
	// byOwner indexes pods by their controller's uid, orphans by namespace ("orphan/<ns>"), so a sync
	// reads its own pods, not its namespace's.
	byOwner map[string]map[string]podEntry
	rs      map[string]*rsEntry // ns/name
	deploys map[string]*dEntry  // ns/name
	// podsRev is the highest pods-bucket revision the cache has applied.
	podsRev uint64
	// rsRev is the highest replicasets-bucket revision the cache has seen, malformed records included.
	rsRev uint64
}

func newCache() *cache {
	return &cache{pods: map[string]map[string]podEntry{}, byOwner: map[string]map[string]podEntry{}, rs: map[string]*rsEntry{}, deploys: map[string]*dEntry{}}
}

// setPod records a pod (nil: deleted) and returns the pod it replaces.
func (c *cache) setPod(key, ns string, p *pb.Pod, rev uint64) *pb.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.podsRev {
		c.podsRev = rev
	}
	name := key[len(ns)+1:]
	m := c.pods[ns]
	old := m[name].pod
	if old != nil {
		delete(c.byOwner[ownerIndex(ns, old)], name)
	}
	if p == nil {
		delete(m, name)
		return old
	}
	if m == nil {
		m = map[string]podEntry{}
		c.pods[ns] = m
	}
	e := podEntry{pod: p, rev: rev}
	m[name] = e
	idx := ownerIndex(ns, p)
	if c.byOwner[idx] == nil {
		c.byOwner[idx] = map[string]podEntry{}
	}
	c.byOwner[idx][name] = e
	return old
}

// ownerIndex is a pod's key in byOwner. A controller uid names one object in the whole cluster.
func ownerIndex(ns string, p *pb.Pod) string {
	if ref := controllerRefPB(p.GetMetadata().GetOwnerReferences()); ref != nil {
		return ref.GetUid()
	}
	return "orphan/" + ns
}

// podsFor returns the pods the owner uid controls, and with orphans the orphans of ns; and the pods
// revision the cache is at.
func (c *cache) podsFor(ns, uid string, orphans bool) ([]podEntry, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]podEntry, 0, len(c.byOwner[uid]))
	for _, p := range c.byOwner[uid] {
		out = append(out, p)
	}
	if orphans {
		for _, p := range c.byOwner["orphan/"+ns] {
			out = append(out, p)
		}
	}
	return out, c.podsRev
}

// hasPod reports whether a pod of that name exists in ns.
func (c *cache) hasPod(ns, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pods[ns][name]
	return ok
}

// sawRS records that the replicasets watch has delivered revision rev.
func (c *cache) sawRS(rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rsRev = max(c.rsRev, rev)
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

// replicaSetsOf returns the ReplicaSets of ns.
func (c *cache) replicaSetsOf(ns string) []*rsEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*rsEntry
	for _, r := range c.rs {
		if r.obj.Namespace == ns {
			out = append(out, r)
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
