package binder

// The commit check: schedulers decide on their own caches, so two replicas can each place one of two
// anti-affine pods on the same node (or zone) at the same moment, or push a zone over a spread's maxSkew.
// The compare-and-set on the node's alloc keys protects resources only. For a pod that inter-pod constraints
// concern — it has required pod (anti-)affinity or a DoNotSchedule spread constraint, or a placed pod's
// required anti-affinity term matches it (symmetry) — the binder re-runs the InterPodAffinity and PodTopologySpread
// filters at commit time, on a view of every node and allocation, and commits such pods one group at a
// time (the decisions that arrived together, in the schedulers' order; a group may be one decision):
//
//	1. read the token commit/inter-pod (revision t)
//	2. wait until the view has applied the alloc stream's last revision (every reservation made so far)
//	3. for each decision in order, run the filters for its node on that view, with the group's earlier
//	   reservations assumed in it; a violation refuses the decision
//	4. if allowed, reserve on the node's alloc keys (compare-and-set, resources as always), tentatively:
//	   marked with the decision, which the reservation keeps once confirmed
//	5. compare-and-set the token from t and confirm the group's reservations; if another binder committed
//	   such pods in between, withdraw them and start again from 1 (that commit may be what makes ours
//	   invalid)
//
// So two checked commits never overlap: each sees every earlier one. A refused pod goes back to the
// schedulers with the alloc revision it was checked against, as a resource conflict does. Pods nothing
// concerns skip all of it. Window left: a pod with no constraints of its own, committed while a pod whose
// required anti-affinity matches it is being committed and before the view holds that pod, does not take
// the token and may miss it. A binder killed between 4 and 5 leaves a tentative reservation that only a
// redelivery of the same decision confirms or withdraws; twins of it wait (reservationBusy) meanwhile.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/cache"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/interpodaffinity"
	"github.com/podbus/podbus/sched/plugins/podtopologyspread"
)

// errViewBehind: the view did not catch up with the alloc stream in time; the decision is retried.
var errViewBehind = errors.New("binder view of nodes and allocations is behind")

// viewCatchUp bounds the wait for the view in step 2.
const viewCatchUp = 5 * time.Second

// checkAttempts bounds the retries of step 5 before the decision goes back to the schedulers.
const checkAttempts = 8

// commitView is the binder's watch-fed view of the nodes and alloc buckets: the scheduler's cache without
// assumptions, and a framework with the inter-pod filters only.
type commitView struct {
	mu    sync.Mutex // serializes this binder's checked commits
	cache *cache.Cache
	fw    *framework.Framework
	once  sync.Once
	ready chan struct{} // closed after the initial values of both buckets
	// applied is closed and replaced whenever an alloc entry is applied, so catchUp waits for the
	// watch instead of polling it.
	appliedMu sync.Mutex
	applied   chan struct{}

	// Alloc keys are decoded as they come but reach the cache only when a check reads it (flush):
	// applying one refreshes its node's NodeInfo, which a binder that commits no constrained pod never
	// needs. pending holds the latest change per key, received the highest revision decoded, and
	// antiPods the keys of pods with required anti-affinity: all that concerns asks for a pod without
	// constraints of its own.
	pmu      sync.Mutex
	pending  map[string]pendingAlloc
	received uint64
	antiPods map[string]bool
}

// pendingAlloc is one alloc key's latest change: uid's pod key (pa nil: deleted) or, with uid "", the
// node's meta key.
type pendingAlloc struct {
	node, uid string
	pa        *pb.PodAllocation
	meta      *pb.NodeAllocation
	rev       uint64
}

// changed returns a channel closed at the next applied alloc entry.
func (v *commitView) changed() <-chan struct{} {
	v.appliedMu.Lock()
	defer v.appliedMu.Unlock()
	return v.applied
}

func (v *commitView) notify() {
	v.appliedMu.Lock()
	defer v.appliedMu.Unlock()
	close(v.applied)
	v.applied = make(chan struct{})
}

func newCommitView() (*commitView, error) {
	fw, err := framework.New(
		framework.Registration{Plugin: interpodaffinity.New()},
		framework.Registration{Plugin: podtopologyspread.New()},
	)
	if err != nil {
		return nil, err
	}
	return &commitView{cache: cache.New(cache.Options{}), fw: fw, ready: make(chan struct{}), applied: make(chan struct{}),
		pending: map[string]pendingAlloc{}, antiPods: map[string]bool{}}, nil
}

// watchView feeds the view until ctx ends.
func (s *Service) watchView(ctx context.Context) error {
	nodesW, err := s.b.Nodes.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("binder: watch nodes: %w", err)
	}
	defer func() { _ = nodesW.Stop() }()
	allocW, err := s.b.Alloc.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("binder: watch alloc: %w", err)
	}
	s.alloc.advance(0)
	defer func() { _ = allocW.Stop() }()
	v := s.view
	nodesDone, allocDone := false, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-nodesW.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil // stopped: the watch closes with the context
				}
				return fmt.Errorf("binder: nodes watch closed")
			}
			if e == nil {
				nodesDone = true
			} else {
				v.applyNode(e)
			}
		case e, ok := <-allocW.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil // stopped: the watch closes with the context
				}
				return fmt.Errorf("binder: alloc watch closed")
			}
			if e == nil {
				allocDone = true
				s.alloc.sync()
			} else {
				if c, ok := v.applyAlloc(e); ok {
					s.alloc.observe(c.node, c.uid, c.pa, c.meta, c.rev)
				}
				s.alloc.advance(e.Revision())
				v.notify()
			}
		}
		if nodesDone && allocDone {
			v.once.Do(func() { close(v.ready) })
		}
	}
}

func (v *commitView) applyNode(e jetstream.KeyValueEntry) {
	name, ok := bus.Untoken(e.Key())
	if !ok {
		return
	}
	n := &pb.Node{}
	if e.Operation() != jetstream.KeyValuePut || proto.Unmarshal(e.Value(), n) != nil {
		v.cache.RemoveNode(name, e.Revision())
		return
	}
	intern.Node(n)
	if n.Metadata == nil {
		n.Metadata = &pb.ObjectMeta{}
	}
	if n.Metadata.Name == "" {
		n.Metadata.Name = name
	}
	v.cache.UpsertNode(n, e.Revision())
}

// applyAlloc takes in an alloc entry (for the cache at the next flush) and returns it decoded.
func (v *commitView) applyAlloc(e jetstream.KeyValueEntry) (pendingAlloc, bool) {
	node, uid, pa, meta, ok := decodeAllocEntry(e)
	if !ok {
		return pendingAlloc{}, false
	}
	c := pendingAlloc{node: node, uid: uid, pa: pa, meta: meta, rev: e.Revision()}
	v.pmu.Lock()
	defer v.pmu.Unlock()
	v.pending[e.Key()] = c
	v.received = max(v.received, e.Revision())
	if len(pa.GetPodAntiAffinity().GetRequired()) > 0 {
		v.antiPods[e.Key()] = true
	} else {
		delete(v.antiPods, e.Key())
	}
	return c, true
}

// flush applies the alloc changes taken in so far to the cache.
func (v *commitView) flush() {
	v.pmu.Lock()
	pending := v.pending
	// No size hint: the map would keep room for the largest backlog ever flushed (every key taken in
	// before the first check) however small the later ones are.
	v.pending = map[string]pendingAlloc{}
	v.pmu.Unlock()
	for _, p := range pending {
		if p.uid == "" {
			v.cache.ApplyNodeMeta(p.node, p.meta, p.rev)
		} else {
			v.cache.ApplyPodAlloc(p.node, p.uid, p.pa, p.rev)
		}
	}
}

// snapshot is the cache's snapshot with every alloc record taken in so far.
func (v *commitView) snapshot() *framework.Snapshot {
	v.flush()
	snap, _ := v.cache.Snapshot()
	return snap
}

// concerns reports whether inter-pod constraints concern pod's commit.
func (v *commitView) concerns(pod *pb.Pod) bool {
	if v == nil {
		return false
	}
	if hasRequiredInterPod(pod) {
		return true
	}
	// Symmetry: a placed pod's required anti-affinity may exclude this pod.
	v.pmu.Lock()
	none := len(v.antiPods) == 0
	v.pmu.Unlock()
	if none {
		return false
	}
	snap := v.snapshot()
	ns, labels := pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetLabels()
	// The distinct terms of the placed pods, as the scheduler's pre-filter reads them.
	for _, t := range snap.RequiredAntiAffinityTerms() {
		if t.Matches(ns, labels) {
			return true
		}
	}
	return false
}

func hasRequiredInterPod(p *pb.Pod) bool {
	a := p.GetSpec().GetAffinity()
	if len(a.GetPodAffinity().GetRequired()) > 0 || len(a.GetPodAntiAffinity().GetRequired()) > 0 {
		return true
	}
	for _, c := range p.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() == "" || c.GetWhenUnsatisfiable() == "DoNotSchedule" {
			return true
		}
	}
	return false
}

// catchUp waits until the view has taken in every alloc revision written so far; it returns that revision.
func (s *Service) catchUp(ctx context.Context) (uint64, error) {
	select {
	case <-s.view.ready:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	st, err := s.conn.JS.Stream(ctx, bus.KVStream(bus.BucketAlloc))
	if err != nil {
		return 0, fmt.Errorf("alloc stream info: %w", err)
	}
	last := st.CachedInfo().State.LastSeq
	deadline := time.NewTimer(viewCatchUp)
	defer deadline.Stop()
	for {
		changed := s.view.changed() // before the check, so no entry applied in between is missed
		s.view.pmu.Lock()
		rev := s.view.received
		s.view.pmu.Unlock()
		if rev >= last { // violates flushes what came in
			return last, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline.C:
			return 0, fmt.Errorf("%w: at alloc revision %d", errViewBehind, last)
		case <-changed:
		}
	}
}

// violates runs the inter-pod filters for pod on node over the view; nil when the pod may go there.
// The pod itself is left out of the view (a redelivered decision finds its own reservation).
func (v *commitView) violates(pi *framework.PodInfo, node string) *framework.Status {
	snap := v.snapshot()
	uid := pi.Pod.GetMetadata().GetUid()
	ni := snap.Get(node)
	if ni == nil {
		return nil // the node is not in the view yet: reserve will judge it
	}
	for _, p := range ni.Pods {
		if p.UID == uid {
			nodes := append([]*framework.NodeInfo(nil), snap.Nodes()...)
			for i, n := range nodes {
				if n.Name() == node {
					ni = n.WithoutPods(uid)
					nodes[i] = ni
				}
			}
			snap = framework.NewSnapshot(nodes)
			break
		}
	}
	state := framework.NewCycleState()
	state.SetSnapshot(snap)
	skip := make([]bool, v.fw.NumFilters())
	if st := v.fw.RunPreFilterPlugins(state, pi, skip); !st.IsSuccess() {
		return st
	}
	if st := v.fw.RunFilterPlugins(state, pi, ni, skip); !st.IsSuccess() {
		return st
	}
	return nil
}

// checkReq is one decision's checked commit; res, rev and err are its outcome, as reserve returns them.
type checkReq struct {
	node, id string // id names the decision (its tentative reservation)
	pod      *pb.Pod
	pi       *framework.PodInfo
	res      reservation
	rev      uint64
	err      error
}

func newCheckReq(node string, pod *pb.Pod, id string) *checkReq {
	return &checkReq{node: node, id: id, pod: pod, pi: framework.NewPodInfo(pod)}
}

// reserveChecked is reserve for a pod that inter-pod constraints concern (steps 1–5 above), for the
// decision named id. The reservation is tentative until the token is won: a twin decision for the same
// pod (another scheduler's, at another binder) finds it busy and waits, so withdrawing it after a lost
// token can never pull the room from under a binding. A refusal by the constraints is
// reservationConstraint with the alloc revision it was judged on.
func (s *Service) reserveChecked(ctx context.Context, node string, pod *pb.Pod, id string) (reservation, uint64, error) {
	r := newCheckReq(node, pod, id)
	s.reserveCheckedGroup(ctx, []*checkReq{r})
	return r.res, r.rev, r.err
}

// reserveCheckedGroup runs steps 1–5 for several decisions at once, in their order: one token read and
// one catch-up, then each is checked on the view plus the group's earlier reservations (assumed in the
// view until its watch brings them) and reserved tentatively, and one compare-and-set of the token makes
// them all firm. A lost token withdraws the group's reservations and checks it again. So each decision
// still sees every commit before it, as one at a time, for a fraction of the round trips.
func (s *Service) reserveCheckedGroup(ctx context.Context, reqs []*checkReq) {
	// One group at a time per binder: they would only lose the token to each other.
	s.view.mu.Lock()
	defer s.view.mu.Unlock()
	pending := reqs
	for range checkAttempts {
		tokRev, err := bus.Get(ctx, s.b.Commit, bus.KeyInterPodCommit, &emptypb.Empty{})
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			failAll(pending, fmt.Errorf("read commit token: %w", err))
			return
		}
		seen, err := s.catchUp(ctx)
		if err != nil {
			failAll(pending, err)
			return
		}
		held := s.checkAndReserve(ctx, pending, seen)
		if len(held) == 0 {
			return
		}
		if s.beforeToken != nil {
			if err := s.beforeToken(); err != nil {
				failAll(held, err)
				return
			}
		}
		_, err = bus.Update(ctx, s.b.Commit, bus.KeyInterPodCommit, &emptypb.Empty{}, tokRev)
		if err == nil {
			// Won: the reservations are firm (a no-op for one that was firm already).
			s.settleAll(ctx, held, true)
			return
		}
		if !errors.Is(err, bus.ErrConflict) && !errors.Is(err, bus.ErrExists) {
			failAll(held, fmt.Errorf("claim commit token: %w", err))
			return
		}
		// Another checked commit got in between: judge them again on a view that includes it.
		metrics.Count("binder.cas_conflicts.commit", 1)
		s.settleAll(ctx, held, false)
		pending = slices.DeleteFunc(held, func(r *checkReq) bool { return r.err != nil })
	}
	for _, r := range pending {
		r.err = fmt.Errorf("reserve pod %s on %s under inter-pod constraints: %w", r.pi.UID(), r.node, errRetry)
	}
}

// checkAndReserve checks reqs in order on the view, each with the ones reserved before it assumed
// there, and reserves tentatively those the constraints allow. It returns those it holds a reservation
// for; the others have their outcome. The assumptions go before it returns: the next check catches up
// with the alloc stream, which holds the reservations by then.
func (s *Service) checkAndReserve(ctx context.Context, reqs []*checkReq, seen uint64) []*checkReq {
	var held []*checkReq
	defer func() {
		for _, r := range held {
			s.view.cache.Forget(r.pi.UID())
		}
	}()
	for _, r := range reqs {
		r.res, r.rev, r.err = 0, 0, nil
		uid := r.pi.UID()
		if st := s.view.violates(r.pi, r.node); st != nil {
			s.log.Debug("inter-pod constraints refuse the decision", "pod", uid, "node", r.node, "why", st.Message())
			metrics.Count("binder.constraint_refusals", 1)
			// The reservation this decision made earlier (an earlier delivery, or an attempt whose
			// binding lost the pod's compare-and-set), tentative or confirmed, goes with the refusal;
			// another decision's stays.
			r.res, r.rev, r.err = reservationConstraint, seen, s.withdraw(ctx, r.node, uid, func(e *pb.PodAllocation) bool {
				return e.GetDecision() == r.id
			})
			continue
		}
		r.res, r.rev, r.err = s.reserveAs(ctx, r.node, r.pod, r.id, r.id)
		if r.err != nil || !r.res.ok() {
			continue
		}
		held = append(held, r)
		// An unknown node cannot be assumed, but neither can the view judge pods on it.
		_ = s.view.cache.Assume(r.pi, r.node, uint64(len(held)))
	}
	return held
}

// settleAll confirms (keep) or withdraws the tentative reservations of reqs, concurrently (they are on
// different nodes, mostly). A failure fails its decision, except confirming a reservation that was
// firm before.
func (s *Service) settleAll(ctx context.Context, reqs []*checkReq, keep bool) {
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Go(func() {
			if err := s.settle(ctx, r.node, r.pi.UID(), r.id, keep); err != nil && (!keep || r.res == reservationAdded) {
				r.err = err
			}
		})
	}
	wg.Wait()
}

func failAll(reqs []*checkReq, err error) {
	for _, r := range reqs {
		r.err = err
	}
}
