package binder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The alloc bucket keeps a node's allocation split (bus.BucketAlloc): one key per placed pod and one
// for the node's preemptions. Every write is one message, a compare-and-set on the last revision of
// any key of the node (bus.WriteUnder), so the node's keys change one write at a time exactly as a
// single record would: a write based on a stale view of any of them is refused. What a write carries
// and costs does not depend on how many pods the node holds; the node's total is summed by each
// reader as the keys change.

// reservation is the outcome of reserve.
type reservation int

const (
	reservationAdded  reservation = iota // the pod's requests were added to the node's total
	reservationHeld                      // the pod already had a reservation there (redelivery, or a twin decision)
	reservationNoNode                    // the node is unknown
	reservationNotReady
	reservationNoRoom
	reservationConstraint // inter-pod constraints refuse the node (commitcheck.go)
	reservationBusy       // another decision is committing the pod there under inter-pod constraints
)

func (r reservation) ok() bool { return r == reservationAdded || r == reservationHeld }

func (r reservation) String() string {
	return [...]string{"added", "held", "node unknown", "node not ready", "insufficient resources", "inter-pod constraints", "tentative reservation of another decision"}[r]
}

// resyncWait bounds the wait for the alloc watch after a lost compare-and-set.
const resyncWait = 2 * time.Second

// reserve commits the pod's requests on node if they fit its allocatable. It is idempotent: a pod that
// already holds a reservation on node keeps it, whatever happened to the node since. The revision is
// that of the node's keys the answer was based on.
func (s *Service) reserve(ctx context.Context, node string, pod *pb.Pod) (reservation, uint64, error) {
	return s.reserveAs(ctx, node, pod, "", "")
}

// reserveAs is reserve for the commit check's decision named decision (commitcheck.go); a non-empty
// tentative marks a new reservation as that decision's tentative one. A tentative reservation of another
// decision is reservationBusy.
func (s *Service) reserveAs(ctx context.Context, node string, pod *pb.Pod, tentative, decision string) (reservation, uint64, error) {
	uid := pod.GetMetadata().GetUid()
	req := podutil.PodRequests(pod)
	for range maxAttempts {
		v, err := s.nodeAlloc(ctx, node, uid)
		if err != nil {
			return 0, 0, err
		}
		if v.pod != nil {
			// Only the pod's key itself may say so, never the cache: another replica may have released it.
			e, err := s.podAlloc(ctx, node, uid)
			if err != nil {
				return 0, 0, err
			}
			if e != nil {
				if t := e.GetTentative(); t != "" && t != tentative {
					return reservationBusy, v.rev, nil
				}
				return reservationHeld, v.rev, nil
			}
			s.alloc.forget(node)
			continue
		}
		// Looked up on every attempt: a node can go NotReady while we lose compare-and-sets.
		n, err := s.node(ctx, node)
		if errors.Is(err, bus.ErrNotFound) {
			return reservationNoNode, v.rev, nil
		}
		if err != nil {
			return 0, 0, err
		}
		if !podutil.NodeIsReady(n) {
			return reservationNotReady, v.rev, nil
		}
		if short := podutil.Insufficient(podutil.NodeAllocatable(n), v.total, req); len(short) > 0 {
			s.log.Debug("no room", "pod", uid, "node", node, "insufficient", strings.Join(short, ","))
			return reservationNoRoom, v.rev, nil
		}
		pa := podAllocation(pod, req)
		pa.Tentative, pa.Decision = tentative, decision
		newRev, err := s.writeAlloc(ctx, node, uid, pa, nil, v.rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("reserve pod %s on %s: %w", uid, node, err)
		}
		if v.meta.GetNominated()[uid] != nil {
			// The room it waited for is taken now.
			if err := s.dropNomination(ctx, node, uid); err != nil {
				return 0, 0, err
			}
		}
		return reservationAdded, newRev, nil
	}
	return 0, 0, fmt.Errorf("reserve pod %s on %s: %w", uid, node, errRetry)
}

// release removes the pod's reservation from node, if it has one (idempotent).
func (s *Service) release(ctx context.Context, node, uid string) error {
	if node == "" {
		return nil
	}
	return s.withdraw(ctx, node, uid, func(*pb.PodAllocation) bool { return true })
}

// withdraw removes uid's reservation from node if it has one that mine accepts.
func (s *Service) withdraw(ctx context.Context, node, uid string, mine func(*pb.PodAllocation) bool) error {
	for range maxAttempts {
		v, err := s.nodeAlloc(ctx, node, uid)
		if err != nil {
			return err
		}
		if v.pod == nil || !mine(v.pod) {
			// Always the pod's key, not the cache: a stale "not there" would leak the reservation.
			e, err := s.podAlloc(ctx, node, uid)
			if err != nil {
				return err
			}
			if e == nil || !mine(e) {
				return nil
			}
			s.alloc.forget(node)
			continue
		}
		_, err = s.writeAlloc(ctx, node, uid, nil, nil, v.rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("release pod %s on %s: %w", uid, node, err)
		}
		return nil
	}
	return fmt.Errorf("release pod %s on %s: %w", uid, node, errRetry)
}

// settle confirms (keep) or withdraws the tentative reservation of decision tentative for uid on node.
// It returns errRetry wrapped when the reservation is not that decision's tentative one any more.
func (s *Service) settle(ctx context.Context, node, uid, tentative string, keep bool) error {
	if !keep {
		return s.withdraw(ctx, node, uid, func(e *pb.PodAllocation) bool { return e.GetTentative() == tentative })
	}
	for range maxAttempts {
		v, err := s.nodeAlloc(ctx, node, uid)
		if err != nil {
			return err
		}
		if v.pod.GetTentative() != tentative || v.pod == nil {
			// A conclusion that it is gone is only drawn from the pod's key itself.
			e, err := s.podAlloc(ctx, node, uid)
			if err != nil {
				return err
			}
			if e == nil || e.GetTentative() != tentative {
				return fmt.Errorf("confirm pod %s on %s: the tentative reservation is gone: %w", uid, node, errRetry)
			}
			s.alloc.forget(node)
			continue
		}
		e := proto.Clone(v.pod).(*pb.PodAllocation) // the entry is the cache's
		e.Tentative = ""
		_, err = s.writeAlloc(ctx, node, uid, e, nil, v.rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("settle pod %s on %s: %w", uid, node, err)
		}
		return nil
	}
	return fmt.Errorf("settle pod %s on %s: %w", uid, node, errRetry)
}

// writeAlloc writes one key of node, compare-and-set on rev, the last revision of any of the node's
// keys: uid's pod key (pa nil: delete it), or with uid "" the meta key (meta nil: delete it). The cache
// follows a write that succeeds; a lost one has the cache catch up before the caller's next attempt.
func (s *Service) writeAlloc(ctx context.Context, node, uid string, pa *pb.PodAllocation, meta *pb.NodeAllocation, rev uint64) (uint64, error) {
	key, del := bus.AllocPodKey(node, uid), pa == nil
	var data []byte
	var err error
	if uid == "" {
		key, del = bus.AllocMetaKey(node), meta == nil
		if !del {
			data, err = proto.Marshal(meta)
		}
	} else if !del {
		data, err = proto.Marshal(pa)
	}
	if err != nil {
		return 0, err
	}
	write := bus.WriteUnder
	if brokenPlainWrites {
		write = plainWrite
	}
	newRev, err := write(ctx, s.conn.JS, s.b.Alloc, key, data, del, bus.AllocNodeFilter(node), rev)
	var conflict *bus.ConflictError
	if errors.As(err, &conflict) {
		metrics.Count("binder.cas_conflicts.alloc", 1)
		s.resync(ctx, node, conflict.Rev)
		return 0, err
	}
	if err != nil {
		s.alloc.forget(node)
		return 0, err
	}
	s.alloc.wrote(node, rev, newRev, uid, pa, meta)
	return newRev, nil
}

// brokenPlainWrites, set only by a test, makes writeAlloc a plain write instead of a compare-and-set:
// the deliberately broken build the history checker (audit/check) must catch.
var brokenPlainWrites bool

func plainWrite(ctx context.Context, _ jetstream.JetStream, kv jetstream.KeyValue, key string, data []byte, del bool, _ string, _ uint64) (uint64, error) {
	if del {
		return 0, kv.Delete(ctx, key)
	}
	return kv.Put(ctx, key, data)
}

// resync lets the alloc watch bring the node's keys up to rev, the node's last revision as the server
// named it, after a lost compare-and-set; if it does not in time, the node is read afresh at its next
// use. A replicated stream does not name the revision: the watch then catches up with the stream.
func (s *Service) resync(ctx context.Context, node string, rev uint64) {
	exact := rev > 0
	if !exact {
		st, err := s.conn.JS.Stream(ctx, bus.KVStream(bus.BucketAlloc))
		if err != nil {
			s.alloc.forget(node)
			return
		}
		rev = st.CachedInfo().State.LastSeq
	}
	if !s.alloc.waitFor(ctx, rev, resyncWait) || (exact && s.alloc.rev(node) < rev) {
		s.alloc.forget(node)
	}
}

// allocView is what a decision needs of a node's keys, at revision rev.
type allocView struct {
	rev   uint64
	total *pb.Resources      // the caller's copy
	pod   *pb.PodAllocation  // the pod asked about, nil when it has no key (shared: do not change)
	meta  *pb.NodeAllocation // nominations and victims' marks, nil when none (shared: do not change)
}

// nodeAlloc returns node's keys as far as the cache knows them, reading them afresh when it cannot say.
func (s *Service) nodeAlloc(ctx context.Context, node, uid string) (allocView, error) {
	if v, ok := s.alloc.view(node, uid); ok {
		return v, nil
	}
	na, err := loadNodeAlloc(ctx, s.b.Alloc, node)
	if err != nil {
		return allocView{}, err
	}
	s.alloc.load(node, na)
	return na.view(uid), nil
}

// podAlloc reads uid's pod key on node: nil when it has none.
func (s *Service) podAlloc(ctx context.Context, node, uid string) (*pb.PodAllocation, error) {
	pa := &pb.PodAllocation{}
	_, err := bus.Get(ctx, s.b.Alloc, bus.AllocPodKey(node, uid), pa)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read allocation of %s on %s: %w", uid, node, err)
	}
	return pa, nil
}

// nodeState is one node's alloc keys, folded: each change costs O(1) to take in.
type nodeState struct {
	rev   uint64 // the last revision of any of the node's keys taken in
	pods  map[string]*pb.PodAllocation
	total *pb.Resources
	meta  *pb.NodeAllocation
}

func newNodeState() *nodeState {
	return &nodeState{pods: map[string]*pb.PodAllocation{}, total: &pb.Resources{}}
}

// apply takes in one change: uid's pod key (pa nil: deleted) or, with uid "", the meta key.
func (n *nodeState) apply(uid string, pa *pb.PodAllocation, meta *pb.NodeAllocation, rev uint64) {
	n.rev = max(n.rev, rev)
	if uid == "" {
		n.meta = meta
		return
	}
	if old := n.pods[uid]; old != nil {
		podutil.Sub(n.total, old.GetRequests())
		delete(n.pods, uid)
	}
	if pa != nil {
		n.pods[uid] = pa
		podutil.Add(n.total, pa.GetRequests())
	}
}

func (n *nodeState) view(uid string) allocView {
	return allocView{rev: n.rev, total: proto.Clone(n.total).(*pb.Resources), pod: n.pods[uid], meta: n.meta}
}

// loadNodeAlloc reads every key of node: the last revision of each, the highest of which is the state's.
func loadNodeAlloc(ctx context.Context, kv jetstream.KeyValue, node string) (*nodeState, error) {
	w, err := kv.Watch(ctx, bus.AllocNodeFilter(node))
	if err != nil {
		return nil, fmt.Errorf("read allocation of %s: %w", node, err)
	}
	defer func() { _ = w.Stop() }()
	n := newNodeState()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read allocation of %s: watch closed", node)
			}
			if e == nil {
				return n, nil
			}
			_, uid, pa, meta, ok := decodeAllocEntry(e)
			if ok {
				n.apply(uid, pa, meta, e.Revision())
			} else {
				n.rev = max(n.rev, e.Revision())
			}
		}
	}
}

// decodeAllocEntry decodes an alloc-bucket entry: the node and either a pod key (uid, pa nil when
// deleted) or the meta key (uid "", meta nil when deleted). ok is false for a key of no known shape;
// an undecodable value counts as deleted.
func decodeAllocEntry(e jetstream.KeyValueEntry) (node, uid string, pa *pb.PodAllocation, meta *pb.NodeAllocation, ok bool) {
	node, uid, ok = bus.SplitAllocKey(e.Key())
	node = intern.String(node) // held per pending change of the commit view
	if !ok || e.Operation() != jetstream.KeyValuePut {
		return node, uid, nil, nil, ok
	}
	if uid == "" {
		meta = &pb.NodeAllocation{}
		if proto.Unmarshal(e.Value(), meta) != nil {
			meta = nil
		}
		return node, uid, nil, meta, true
	}
	pa = &pb.PodAllocation{}
	if proto.Unmarshal(e.Value(), pa) != nil {
		return node, uid, nil, nil, true
	}
	intern.PodAllocation(pa) // the caches keep it as long as the pod runs
	// The uid (the cache's key) and the name in one allocation: the entry's key, which uid is a part
	// of, is not kept.
	ids := uid + pa.GetName()
	uid, pa.Name = ids[:len(uid)], ids[len(uid):]
	return node, uid, pa, nil, true
}

// ReadAllocation reads node's alloc keys folded into one record (total and victims' marks included)
// and the last revision of any of them (0: none). For tools and tests; it reads every key of the node.
func ReadAllocation(ctx context.Context, kv jetstream.KeyValue, node string) (*pb.NodeAllocation, uint64, error) {
	n, err := loadNodeAlloc(ctx, kv, node)
	if err != nil {
		return nil, 0, err
	}
	return n.record(node), n.rev, nil
}

// record is the node's keys as one NodeAllocation.
func (n *nodeState) record(node string) *pb.NodeAllocation {
	a := &pb.NodeAllocation{Node: node, Pods: make(map[string]*pb.PodAllocation, len(n.pods)),
		Total: proto.Clone(n.total).(*pb.Resources), Nominated: n.meta.GetNominated()}
	for uid, p := range n.pods {
		if by := n.meta.GetPods()[uid].GetPreemptedBy(); by != "" {
			p = proto.Clone(p).(*pb.PodAllocation)
			p.PreemptedBy = by
		}
		a.Pods[uid] = p
	}
	return a
}

// PlaceAllocations writes the alloc keys of pods placed directly, bypassing the binder (tools that
// place pods, such as schedsim): one pod key each. Capacity is not checked; the keys must not exist.
func PlaceAllocations(ctx context.Context, kv jetstream.KeyValue, node string, pods map[string]*pb.PodAllocation) error {
	for uid, pa := range pods {
		if _, err := bus.Create(ctx, kv, bus.AllocPodKey(node, uid), pa); err != nil {
			return err
		}
	}
	return nil
}

// allocCache holds the alloc keys of every node, folded per node, as the watch and this replica's own
// writes bring them, so a decision costs no read. It is only a hint: every write is still a
// compare-and-set on the node's keys, and a lost one has the cache catch up or drop the node.
type allocCache struct {
	mu sync.Mutex
	m  map[string]*nodeState // a nil state: dropped, read the node afresh
	// synced: the watch has delivered every key that existed when it started, so a node without an
	// entry has no keys (or ones the watch is about to deliver: the first write then conflicts).
	synced bool
	// watching: a watch feeds the cache; received is the highest revision it delivered, and advanced is
	// closed and replaced whenever it grows.
	watching bool
	received uint64
	advanced chan struct{}
}

// view returns what the cache holds of node (see allocView); ok is false when it cannot say.
func (c *allocCache) view(node, uid string) (allocView, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.m[node]
	switch {
	case n != nil:
		return n.view(uid), true
	case !ok && c.synced:
		return allocView{total: &pb.Resources{}}, true
	}
	return allocView{}, false
}

// inspect runs f on node's state under the lock; false when the cache cannot say.
func (c *allocCache) inspect(node string, f func(n *nodeState)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.m[node]
	switch {
	case n != nil:
		f(n)
		return true
	case !ok && c.synced:
		f(newNodeState())
		return true
	}
	return false
}

func (c *allocCache) rev(node string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.m[node]; n != nil {
		return n.rev
	}
	return 0
}

// load installs a node state read afresh, unless the cache holds a newer one.
func (c *allocCache) load(node string, n *nodeState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[node]; old != nil && old.rev >= n.rev {
		return
	}
	if c.m == nil {
		c.m = map[string]*nodeState{}
	}
	c.m[node] = n
}

// wrote takes in this replica's write of one key at newRev, made on the state at rev. The state it
// holds is that one unless the watch moved it on (it then holds the write already) or it was dropped.
func (c *allocCache) wrote(node string, rev, newRev uint64, uid string, pa *pb.PodAllocation, meta *pb.NodeAllocation) {
	intern.PodAllocation(pa) // as the watch's entries: kept as long as the pod runs
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.writtenAt(node, rev); n != nil {
		n.apply(uid, pa, meta, newRev)
	}
}

// writtenAt is node's state if it is still the one at rev that this replica wrote on (a node first
// written at rev 0 is added once the cache is synced), else nil. c.mu is held.
func (c *allocCache) writtenAt(node string, rev uint64) *nodeState {
	n, ok := c.m[node]
	if n == nil && !ok && c.synced && rev == 0 {
		n = newNodeState()
		if c.m == nil {
			c.m = map[string]*nodeState{}
		}
		c.m[node] = n
	}
	if n != nil && n.rev == rev {
		return n
	}
	return nil
}

// wroteAll takes in this replica's atomic write of the pod keys of uids (entries pas) at newRev,
// made on the state at rev (see wrote).
func (c *allocCache) wroteAll(node string, rev, newRev uint64, uids []string, pas []*pb.PodAllocation) {
	for _, pa := range pas {
		intern.PodAllocation(pa)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.writtenAt(node, rev); n != nil {
		for i, uid := range uids {
			n.apply(uid, pas[i], nil, newRev)
		}
	}
}

// observe takes in an entry of the alloc watch, unless the node's state is newer or dropped (a node
// read afresh later gets it from the read).
func (c *allocCache) observe(node, uid string, pa *pb.PodAllocation, meta *pb.NodeAllocation, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*nodeState{}
	}
	n, ok := c.m[node]
	if !ok {
		n = newNodeState()
		c.m[node] = n
	}
	if n != nil && rev > n.rev {
		n.apply(uid, pa, meta, rev)
	}
}

// advance records that the watch delivered rev.
func (c *allocCache) advance(rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watching = true
	if rev > c.received {
		c.received = rev
		if c.advanced != nil {
			close(c.advanced)
			c.advanced = nil
		}
	}
}

// waitFor waits up to d for the watch to deliver rev; false when it did not (or no watch runs).
func (c *allocCache) waitFor(ctx context.Context, rev uint64, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		c.mu.Lock()
		if !c.watching {
			c.mu.Unlock()
			return false
		}
		if c.received >= rev {
			c.mu.Unlock()
			return true
		}
		if c.advanced == nil {
			c.advanced = make(chan struct{})
		}
		ch := c.advanced
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		case <-ch:
		}
	}
}

func (c *allocCache) forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*nodeState{}
	}
	c.m[node] = nil
}

// sync records that the watch delivered the keys that existed when it started.
func (c *allocCache) sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.synced = true
}

// PodAllocation is the entry the binder writes for pod in its node's alloc record (tools that place
// pods directly write the same).
func PodAllocation(pod *pb.Pod) *pb.PodAllocation {
	return podAllocation(pod, podutil.PodRequests(pod))
}

// podAllocation is what the alloc record keeps of a pod for the schedulers' inter-pod plugins and
// preemption.
func podAllocation(pod *pb.Pod, req *pb.Resources) *pb.PodAllocation {
	md, spec := pod.GetMetadata(), pod.GetSpec()
	return &pb.PodAllocation{
		Namespace:         md.GetNamespace(),
		Name:              md.GetName(),
		Requests:          req,
		Labels:            md.GetLabels(),
		Priority:          spec.GetPriority(),
		PodAffinity:       spec.GetAffinity().GetPodAffinity(),
		PodAntiAffinity:   spec.GetAffinity().GetPodAntiAffinity(),
		CreationTimestamp: md.GetCreationTimestamp(),
		SchedulerName:     spec.GetSchedulerName(),
	}
}
