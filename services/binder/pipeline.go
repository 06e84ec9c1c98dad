package binder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Decisions for one node are committed together. Taken one at a time, each waits on four round trips
// in turn (read the pod, reserve, bind, announce) and the next one waits for the reservation before it,
// since every reservation is a compare-and-set on the node's keys: a node's decisions queue behind each
// other. Together, the pods are read at once, the reservations are made (reserveAll: one atomic batch
// under one compare-and-set on the node's keys where the bucket is replicated, one compare-and-set
// after another on a single server), and the bindings and announcements go out at once. Each binding
// stays a compare-and-set on its own pod, and each decision is acknowledged only after its own effect.
//
// Only the plain case goes this way: a decision for a node, whose stored pod is unbound, alive, not
// nominated anywhere, and neither refused by its node nor concerned by inter-pod constraints. Anything
// else (and anything the plain way loses a compare-and-set for) is decided alone, as before, after the
// group's reservations.

// handleDecisions handles the decisions queued for one worker: grouped by node, each group committed
// together (decideNode), the groups at once.
func (s *Service) handleDecisions(ctx context.Context, ms []*bus.Msg) []error {
	errs := make([]error, len(ms))
	ds := make([]nodeDecision, len(ms))
	byNode := map[string][]int{}
	var order []string
	for i, m := range ms {
		d, err := decisionOf(m)
		if err != nil {
			errs[i] = err
			continue
		}
		ds[i] = nodeDecision{d: d, seq: m.Position()}
		key := d.GetNode()
		if key == "" {
			key = d.GetNominatedNode() // a preemption writes that node's keys: after its group's reservations
		}
		if _, ok := byNode[key]; !ok {
			order = append(order, key)
		}
		byNode[key] = append(byNode[key], i)
	}
	var wg sync.WaitGroup
	for n, key := range order {
		idx := byNode[key]
		decide := func() {
			group := make([]nodeDecision, len(idx))
			for j, i := range idx {
				group[j] = ds[i]
			}
			for j, err := range s.decideNode(ctx, group) {
				errs[idx[j]] = err
			}
		}
		if n == len(order)-1 {
			decide() // the last group on this goroutine, while the others run
			continue
		}
		s.spread(&wg, decide)
	}
	wg.Wait()
	return errs
}

// spread runs f beside the caller, counted in wg: on an idle worker of s.groups where there is one,
// whose stack has grown already.
func (s *Service) spread(wg *sync.WaitGroup, f func()) {
	if s.groups == nil {
		wg.Go(f)
		return
	}
	wg.Add(1)
	s.groups.Go(func() {
		defer wg.Done()
		f()
	})
}

// nodeDecision is one decision of a group and its position in the stream.
type nodeDecision struct {
	d   *pb.SchedulingDecision
	seq uint64
}

// plain is one decision of decideNode's plain way, with the stored pod and its reservation.
type plain struct {
	i   int // index in the group
	pod *pb.Pod
	rev uint64
	res reservation
	// alone: decided alone after all: it has a reservation or a nomination on the node already
	// (which reserve sorts out), or a twin decision in the group made its reservation
	alone bool
}

// decideNode decides ds, decisions naming the same node (unschedulable ones: nominating it), and
// returns one error per decision.
func (s *Service) decideNode(ctx context.Context, ds []nodeDecision) []error {
	errs := make([]error, len(ds))
	if len(ds) == 1 {
		for i, nd := range ds {
			errs[i] = s.decide(ctx, nd.d, nd.seq)
		}
		return errs
	}
	stored := make([]*storedPod, len(ds))
	readErrs := make([]error, len(ds))
	var reads sync.WaitGroup
	for i, nd := range ds {
		s.spread(&reads, func() {
			pod, rev, err := s.pod(ctx, bus.PodKey(nd.d.GetNamespace(), nd.d.GetName()))
			stored[i], readErrs[i] = &storedPod{pod: pod, rev: rev}, err
		})
	}
	reads.Wait()

	var plains []*plain
	alone := make([]bool, len(ds))
	for i, nd := range ds {
		if readErrs[i] != nil {
			errs[i] = readErrs[i]
			continue
		}
		if ok, err := s.isPlain(ctx, stored[i].pod, nd.d); err != nil {
			errs[i] = err
		} else if ok {
			plains = append(plains, &plain{i: i, pod: stored[i].pod, rev: stored[i].rev})
		} else {
			alone[i] = true
		}
	}
	var allocRev uint64
	if len(plains) > 0 {
		node := ds[plains[0].i].d.GetNode()
		var err error
		allocRev, err = s.reserveAll(ctx, node, plains)
		if errors.Is(err, bus.ErrAtomicDisabled) {
			s.refusedAt.Store(s.now().UnixNano())
			s.log.Warn("the alloc bucket does not take atomic batches; reservations go one by one for a while", "err", err)
			allocRev, err = s.reserveAll(ctx, node, plains)
		}
		if err != nil {
			for _, p := range plains {
				errs[p.i] = err
			}
			plains = nil
		}
	}
	var wg sync.WaitGroup
	for _, p := range plains {
		nd := ds[p.i]
		s.spread(&wg, func() {
			switch {
			case p.alone:
				errs[p.i] = s.decideWith(ctx, nd.d, nd.seq, nil, nil)
				return
			case !p.res.ok():
				errs[p.i] = s.conflict(ctx, p.pod, p.rev, nd.d, nd.seq, p.res, allocRev)
				return
			}
			err := s.commit(ctx, bus.PodKey(nd.d.GetNamespace(), nd.d.GetName()), p.pod, p.rev, nd.d)
			if errors.Is(err, bus.ErrConflict) {
				metrics.Count("binder.cas_conflicts.pod", 1)
				err = s.decideWith(ctx, nd.d, nd.seq, nil, nil) // the pod changed: judge it again
			}
			errs[p.i] = err
		})
	}
	for i, nd := range ds {
		if alone[i] {
			errs[i] = s.decideWith(ctx, nd.d, nd.seq, stored[i], nil)
		}
	}
	wg.Wait()
	return errs
}

// isPlain says whether the decision can go decideNode's plain way for pod as stored.
func (s *Service) isPlain(ctx context.Context, pod *pb.Pod, d *pb.SchedulingDecision) (bool, error) {
	if d.GetNode() == "" || d.GetUnschedulable() || judge(pod, d) != verdictAct ||
		pod.GetStatus().GetNominatedNodeName() != "" || s.view.concerns(pod) {
		return false, nil
	}
	why, err := s.refusal(ctx, pod, d)
	return why == "" && err == nil, err
}

// reserveAll reserves room on node for every pod of ps that fits, in order. Each p.res says what became
// of its pod: added, or why not (or p.alone: it holds a reservation or a nomination there already). It
// returns the revision of the node's keys the answers are based on.
//
// Where the alloc bucket is replicated, every compare-and-set waits for a quorum, so the reservations go
// in one atomic batch under one compare-and-set on the node's keys. On a single server a compare-and-set
// is cheap but an atomic batch is not (the server stages each in a file store of its own), so they go
// one after another, each on the revision the one before it left.
func (s *Service) reserveAll(ctx context.Context, node string, ps []*plain) (uint64, error) {
	pending := ps
	for range maxAttempts {
		var rev uint64
		var ws []bus.KVWrite
		var added []*plain
		var pas []*pb.PodAllocation
		var err error
		n, nerr := s.node(ctx, node)
		if nerr != nil && !errors.Is(nerr, bus.ErrNotFound) {
			return 0, nerr
		}
		ierr := s.inspect(ctx, node, func(st *nodeState) {
			rev = st.rev
			total := proto.Clone(st.total).(*pb.Resources)
			ws, added, pas = ws[:0], added[:0], pas[:0]
			seen := map[string]bool{}
			for _, p := range pending {
				uid := p.pod.GetMetadata().GetUid()
				req := podutil.PodRequests(p.pod)
				p.alone = false
				switch {
				case st.pods[uid] != nil || st.meta.GetNominated()[uid] != nil || seen[uid]:
					p.alone = true // a twin decision included
				case nerr != nil:
					p.res = reservationNoNode
				case !podutil.NodeIsReady(n):
					p.res = reservationNotReady
				case len(podutil.Insufficient(podutil.NodeAllocatable(n), total, req)) > 0:
					p.res = reservationNoRoom
				default:
					pa := podAllocation(p.pod, req)
					data, merr := proto.Marshal(pa)
					if merr != nil {
						err = merr
						return
					}
					p.res = reservationAdded
					seen[uid] = true
					podutil.Add(total, req)
					ws = append(ws, bus.KVWrite{Key: bus.AllocPodKey(node, uid), Data: data})
					added, pas = append(added, p), append(pas, pa)
				}
			}
		})
		if ierr != nil {
			return 0, ierr
		}
		if err != nil {
			return 0, fmt.Errorf("reserve on %s: %w", node, err)
		}
		if len(ws) == 0 {
			return rev, nil
		}
		if !s.atomicBatch(len(ws)) {
			written := 0
			for i, p := range added {
				newRev, err := s.writeAlloc(ctx, node, p.pod.GetMetadata().GetUid(), pas[i], nil, rev)
				if errors.Is(err, bus.ErrConflict) {
					break
				}
				if err != nil {
					return 0, fmt.Errorf("reserve pod %s on %s: %w", p.pod.GetMetadata().GetUid(), node, err)
				}
				rev, written = newRev, written+1
			}
			if written == len(added) {
				return rev, nil
			}
			// Judged again on the node as it is now: those after the lost compare-and-set, and those
			// found without room before it.
			done := map[*plain]bool{}
			for _, p := range added[:written] {
				done[p] = true
			}
			pending = slices.DeleteFunc(slices.Clone(pending), func(p *plain) bool { return done[p] })
			continue
		}
		newRev, err := bus.WriteAllUnder(ctx, s.conn.JS, s.b.Alloc, ws, bus.AllocNodeFilter(node), rev)
		var conflict *bus.ConflictError
		if errors.As(err, &conflict) {
			metrics.Count("binder.cas_conflicts.alloc", 1)
			s.resync(ctx, node, conflict.Rev)
			continue
		}
		if err != nil {
			s.alloc.forget(node)
			return 0, err
		}
		uids := make([]string, len(added))
		for i, p := range added {
			uids[i] = p.pod.GetMetadata().GetUid()
		}
		s.alloc.wroteAll(node, rev, newRev, uids, pas)
		metrics.Count("binder.batched_reservations", int64(len(ws)))
		return newRev, nil
	}
	return 0, fmt.Errorf("reserve on %s: %w", node, errRetry)
}
