package binder

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/podbus/podbus/internal/metrics"

	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

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

// reserve commits the pod's requests on node if they fit its allocatable. It is idempotent: a pod that
// already holds a reservation on node keeps it, whatever happened to the node since. The revision is
// that of the alloc record the answer was based on.
func (s *Service) reserve(ctx context.Context, node string, pod *pb.Pod) (reservation, uint64, error) {
	return s.reserveAs(ctx, node, pod, "")
}

// reserveAs is reserve; a non-empty tentative marks a new reservation as the tentative one of that
// decision (commitcheck.go). A tentative reservation of another decision is reservationBusy.
func (s *Service) reserveAs(ctx context.Context, node string, pod *pb.Pod, tentative string) (reservation, uint64, error) {
	uid := pod.GetMetadata().GetUid()
	key := bus.NodeKey(node)
	req := podutil.PodRequests(pod)
	for range maxAttempts {
		a, rev, err := s.allocation(ctx, node, false)
		if err != nil {
			return 0, 0, err
		}
		if _, ok := a.Pods[uid]; ok {
			// Only the record itself may say so, never the cache: another replica may have released it.
			fa, frev, err := s.allocation(ctx, node, true)
			if err != nil {
				return 0, 0, err
			}
			if e, ok := fa.Pods[uid]; ok {
				if t := e.GetTentative(); t != "" && t != tentative {
					return reservationBusy, frev, nil
				}
				return reservationHeld, frev, nil
			}
			s.alloc.put(node, fa, frev)
			continue
		}
		// Looked up on every attempt: a node can go NotReady while we lose compare-and-sets.
		n, err := s.node(ctx, node)
		if errors.Is(err, bus.ErrNotFound) {
			return reservationNoNode, rev, nil
		}
		if err != nil {
			return 0, 0, err
		}
		if !podutil.NodeIsReady(n) {
			return reservationNotReady, rev, nil
		}
		if short := podutil.Insufficient(podutil.NodeAllocatable(n), a.GetTotal(), req); len(short) > 0 {
			s.log.Debug("no room", "pod", uid, "node", node, "insufficient", strings.Join(short, ","))
			return reservationNoRoom, rev, nil
		}
		a.Pods[uid] = podAllocation(pod, req)
		a.Pods[uid].Tentative = tentative
		delete(a.Nominated, uid) // the room it waited for is taken now
		a.Total = total(a)
		newRev, err := bus.Update(ctx, s.b.Alloc, key, a, rev) // rev 0: create the record
		if errors.Is(err, bus.ErrConflict) {
			metrics.Count("binder.cas_conflicts.alloc", 1)
			s.alloc.forget(node)
			continue
		}
		if err != nil {
			s.alloc.forget(node)
			return 0, 0, fmt.Errorf("reserve pod %s on %s: %w", uid, node, err)
		}
		s.alloc.put(node, a, newRev)
		return reservationAdded, newRev, nil
	}
	return 0, 0, fmt.Errorf("reserve pod %s on %s: %w", uid, node, errRetry)
}

// release removes the pod's reservation from node, if it has one (idempotent).
func (s *Service) release(ctx context.Context, node, uid string) error {
	if node == "" {
		return nil
	}
	key := bus.NodeKey(node)
	for range maxAttempts {
		// Always the record, not the cache: a stale "not there" would leak the reservation.
		a, rev, err := s.allocation(ctx, node, true)
		if err != nil {
			return err
		}
		if _, ok := a.Pods[uid]; !ok || rev == 0 {
			return nil
		}
		delete(a.Pods, uid)
		a.Total = total(a)
		newRev, err := bus.Update(ctx, s.b.Alloc, key, a, rev)
		if errors.Is(err, bus.ErrConflict) {
			s.alloc.forget(node)
			continue
		}
		if err != nil {
			s.alloc.forget(node)
			return fmt.Errorf("release pod %s on %s: %w", uid, node, err)
		}
		s.alloc.put(node, a, newRev)
		return nil
	}
	return fmt.Errorf("release pod %s on %s: %w", uid, node, errRetry)
}

// allocation reads a node's record and its revision; an empty record at revision 0 when there is none.
// Unless fresh, the copy this replica wrote last may stand in for the record.
func (s *Service) allocation(ctx context.Context, node string, fresh bool) (*pb.NodeAllocation, uint64, error) {
	if !fresh {
		switch a, rev, known := s.alloc.get(node); {
		case a != nil:
			return a, rev, nil
		case known: // no record: the first pod on the node creates it
			return &pb.NodeAllocation{Node: node, Pods: map[string]*pb.PodAllocation{}}, 0, nil
		}
	}
	a := &pb.NodeAllocation{}
	rev, err := bus.Get(ctx, s.b.Alloc, bus.NodeKey(node), a)
	if errors.Is(err, bus.ErrNotFound) {
		a, rev = &pb.NodeAllocation{}, 0
	} else if err != nil {
		return nil, 0, fmt.Errorf("read allocation of %s: %w", node, err)
	}
	a.Node = node
	if a.Pods == nil {
		a.Pods = map[string]*pb.PodAllocation{}
	}
	return a, rev, nil
}

// total is recomputed from the pods rather than adjusted, so it can never drift from them.
func total(a *pb.NodeAllocation) *pb.Resources {
	t := &pb.Resources{}
	for _, p := range a.GetPods() {
		podutil.Add(t, p.GetRequests())
	}
	return t
}

// allocCache remembers the alloc records this replica wrote last or saw on its watch, with their
// revisions, so a decision costs no read. It is only a hint: every write is still a compare-and-set,
// and a conflict (another replica wrote) drops the entry so the next attempt reads the record afresh.
type allocCache struct {
	mu sync.Mutex
	m  map[string]cachedAlloc // a nil record: dropped, read it
	// synced: the watch has delivered every record that existed when it started, so a node without an
	// entry has no record (or one the watch is about to deliver: the create then conflicts).
	synced bool
}

type cachedAlloc struct {
	a   *pb.NodeAllocation
	rev uint64
}

// get returns a copy of the node's record whose maps the caller may change; their entries are shared
// and must be replaced, not changed (a deep copy per decision is work for nothing). Without a record, known
// reports that the node has none as far as the cache knows, rather than that the cache does not know.
func (c *allocCache) get(node string) (_ *pb.NodeAllocation, rev uint64, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[node]
	if !ok {
		return nil, 0, c.synced
	}
	if e.a == nil {
		return nil, 0, false
	}
	a := &pb.NodeAllocation{Node: e.a.GetNode(), Total: e.a.GetTotal(), Pods: maps.Clone(e.a.GetPods()),
		Nominated: maps.Clone(e.a.GetNominated())}
	if a.Pods == nil { // cloning an empty map gives nil; callers add to it
		a.Pods = map[string]*pb.PodAllocation{}
	}
	return a, e.rev, true
}

// put stores a record the caller no longer changes.
func (c *allocCache) put(node string, a *pb.NodeAllocation, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedAlloc{}
	}
	c.m[node] = cachedAlloc{a: a, rev: rev}
}

// at returns the record held for node if it is the one at revision rev (nil otherwise). It is shared:
// records are never changed once stored.
func (c *allocCache) at(node string, rev uint64) *pb.NodeAllocation {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[node]; ok && e.rev == rev {
		return e.a
	}
	return nil
}

// observe keeps a record seen on the alloc watch unless a newer one is held already (nil: deleted), so
// the first decision for a node this replica never wrote costs no read either.
func (c *allocCache) observe(node string, a *pb.NodeAllocation, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[node]; ok && e.rev >= rev {
		return
	}
	if a == nil {
		delete(c.m, node)
		return
	}
	if c.m == nil {
		c.m = map[string]cachedAlloc{}
	}
	c.m[node] = cachedAlloc{a: a, rev: rev}
}

func (c *allocCache) forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedAlloc{}
	}
	c.m[node] = cachedAlloc{}
}

// sync records that the watch delivered the records that existed when it started.
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

// settle confirms (keep) or withdraws the tentative reservation of decision tentative for uid on node.
// It returns errRetry wrapped when the reservation is not that decision's tentative one any more.
func (s *Service) settle(ctx context.Context, node, uid, tentative string, keep bool) error {
	key := bus.NodeKey(node)
	fresh := false
	for range maxAttempts {
		// The cached record (usually the one reserve just wrote) saves a read when it shows the
		// reservation; a conclusion that it is gone is only drawn from the record itself.
		a, rev, err := s.allocation(ctx, node, fresh)
		if err != nil {
			return err
		}
		e, ok := a.Pods[uid]
		if (!ok || e.GetTentative() != tentative) && !fresh {
			fresh = true
			continue
		}
		if !ok || e.GetTentative() != tentative {
			if !keep {
				return nil // withdrawn already (a redelivery), or released by a deletion
			}
			return fmt.Errorf("confirm pod %s on %s: the tentative reservation is gone: %w", uid, node, errRetry)
		}
		if keep {
			e = proto.Clone(e).(*pb.PodAllocation) // the entry may be the cache's (see allocCache.get)
			e.Tentative = ""
			a.Pods[uid] = e
		} else {
			delete(a.Pods, uid)
			a.Total = total(a)
		}
		newRev, err := bus.Update(ctx, s.b.Alloc, key, a, rev)
		if errors.Is(err, bus.ErrConflict) {
			metrics.Count("binder.cas_conflicts.alloc", 1)
			s.alloc.forget(node)
			fresh = true
			continue
		}
		if err != nil {
			s.alloc.forget(node)
			return fmt.Errorf("settle pod %s on %s: %w", uid, node, err)
		}
		s.alloc.put(node, a, newRev)
		return nil
	}
	return fmt.Errorf("settle pod %s on %s: %w", uid, node, errRetry)
}
