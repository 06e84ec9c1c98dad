// Package binder turns scheduling decisions into bindings. It is the only writer of the alloc bucket
// (what each node has committed) and of spec.nodeName, so it is where "a pod is bound at most once" and
// "a node is never committed beyond its allocatable" are enforced, whatever stale or concurrent
// decisions the schedulers send.
//
// One decision, step by step (every step is a compare-and-set; a lost one re-reads and starts over):
//
//	pod.scheduled ─▶ read pod ─┬─ gone / other uid / deleting ───────────▶ release alloc <node>.p.<uid>, ack
//	                           ├─ bound to <node> ───────────────────────▶ ensure reservation, pod.bound.<node>, ack
//	                           ├─ bound elsewhere ───────────────────────▶ release alloc <node>.p.<uid>, ack
//	                           ├─ node refused by the pod's nodeSelector,
//	                           │  node affinity or untolerated taints ───▶ pod.pending (conflict), ack
//	                           ├─ unschedulable ─────────────────────────▶ PodScheduled=False, FailedScheduling, ack
//	                           └─ reserve alloc <node>.p.<uid> ─┬─ no room ─▶ pod.pending (conflict), ack
//	                                                            └─ reserved ─▶ bind pod ─▶ pod.bound.<node>, Scheduled, ack
//	pod.deleted ─▶ release alloc <node>.p.<uid>, ack
//
// The pod is always the stored one: the pod body a decision carries is ignored, since anyone who can
// publish pod.scheduled could carry any body.
//
// A reservation is made before the binding, so a crash in between leaves a reservation and an
// unacknowledged decision: its redelivery either binds (the reservation is found and reused) or finds
// the pod bound elsewhere or gone and releases it.
package binder

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbus/podbus/internal/events"
	"github.com/podbus/podbus/internal/gopool"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Config configures one binder replica. Any number of replicas may run at once.
type Config struct {
	ID     string       // replica identity, stamped on messages as "binder/<ID>"
	Logger *slog.Logger // nil: slog.Default()
	// SharedWatches, when set, shares whole-bucket watches with the process's other services.
	SharedWatches *bus.WatchHub
	// Workers handle decisions concurrently; decisions for the same node go to the same worker. A
	// decision waits on several round trips in turn, so nodes that share a worker queue behind each
	// other: the default leaves about one worker per node in a cluster of a hundred.
	Workers int // default 128
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("invalid binder config")

// Service is one binder replica.
type Service struct {
	cfg   Config
	actor string
	conn  *bus.Conn
	pub   *bus.Publisher
	rec   *events.Recorder
	log   *slog.Logger
	b     bus.Buckets // opened by Run (or open)
	nodes nodeCache
	alloc allocCache
	view  *commitView // nil: no commit check (tests of the bare protocol)
	// atomicAlloc: a node's group of reservations may go in one atomic batch (reserveAll), unless the
	// bucket refused one less than atomicRetry ago (refusedAt, Unix nanoseconds): provisioning by an
	// older podbus turns atomic publish off until the next provisioning turns it on again.
	// replicatedAlloc: the alloc bucket has replicas, so every compare-and-set waits for a quorum.
	atomicAlloc     bool
	refusedAt       atomic.Int64
	replicatedAlloc bool
	batches         batchMode
	now             func() time.Time
	// perDecision: every decision is decided on its own, never in a node's group (benchmarks compare)
	perDecision bool
	// afterReserve, when set (tests only), runs between reserving and binding; an error stops the
	// decision there, as a crash would.
	afterReserve func(d *pb.SchedulingDecision) error
	// beforeToken, when set (tests only), runs between a checked group's tentative reservations and the
	// token's compare-and-set; an error fails the group there, reservations left, as a crash would.
	beforeToken func() error
	// groups runs a batch's node groups, and a group's reads and commits, side by side (set by Run;
	// nil: a goroutine each).
	groups *gopool.Pool
}

// New returns a binder replica on conn. It does not touch the bus until Run.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("%w: ID is required", ErrConfig)
	}
	if conn == nil || conn.JS == nil {
		return nil, fmt.Errorf("%w: a connection is required", ErrConfig)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 128
	}
	actor := "binder/" + cfg.ID
	pub := bus.NewPublisher(conn.JS, actor)
	view, err := newCommitView()
	if err != nil {
		return nil, fmt.Errorf("binder: %w", err)
	}
	return &Service{
		view:  view,
		cfg:   cfg,
		actor: actor,
		conn:  conn,
		pub:   pub,
		rec:   events.NewRecorder(bus.NewBatcher(conn.JS, actor), componentScheduler, actor),
		log:   cmp.Or(cfg.Logger, slog.Default()).With("actor", actor),
		nodes: nodeCache{nodes: map[string]*pb.Node{}},
		now:   time.Now,
	}, nil
}

// Run watches nodes and handles decisions and deletions until ctx is cancelled, then drains and returns nil.
func (s *Service) Run(ctx context.Context) error {
	if err := s.open(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	s.groups = gopool.New(gctx, 2*s.cfg.Workers)
	g.Go(func() error { return s.watchNodes(gctx) })
	g.Go(func() error { return s.watchView(gctx) })
	g.Go(func() error {
		return bus.Consume(gctx, s.conn.JS, bus.ConsumerSpec{
			Stream:   bus.StreamPods,
			Durable:  bus.ConsumerBinder,
			Filters:  []string{bus.SubjPodScheduled},
			Workers:  s.cfg.Workers,
			Key:      decisionNode,
			GroupKey: keyChecked,
			Group:    s.handleCheckedDecisions,
			KeyGroup: s.keyGroup(),
			Logger:   s.log,
		}, s.handleDecision)
	})
	g.Go(func() error {
		return bus.Consume(gctx, s.conn.JS, bus.ConsumerSpec{
			Stream:  bus.StreamPods,
			Durable: bus.ConsumerBinderDeleted,
			Filters: []string{bus.SubjPodDeleted},
			Workers: s.cfg.Workers,
			Key:     deletedNode,
			Logger:  s.log,
		}, s.handleDeleted)
	})
	err := g.Wait()
	if ctx.Err() != nil {
		return nil // stopping: an error of a step cut short by the cancellation is not a failure
	}
	return err
}

func (s *Service) open(ctx context.Context) error {
	if s.b.Pods != nil {
		return nil
	}
	b, err := bus.OpenBuckets(ctx, s.conn.JS)
	if err != nil {
		return fmt.Errorf("binder: %w", err)
	}
	s.b = s.cfg.SharedWatches.WrapBuckets(b)
	st, err := bus.Stream(ctx, s.conn.JS, bus.KVStream(bus.BucketAlloc))
	if err != nil {
		return fmt.Errorf("binder: %w", err)
	}
	cfg := st.CachedInfo().Config
	s.replicatedAlloc = cfg.Replicas > 1
	s.atomicAlloc = s.batches != batchSequential
	if !cfg.AllowAtomicPublish {
		s.refusedAt.Store(s.now().UnixNano())
	}
	return nil
}

// atomicRetry is how long after a refused atomic batch reservations go one by one.
const atomicRetry = time.Minute

// minAtomicBatch is the fewest reservations a single server takes in an atomic batch: it stages each
// batch in a file store of its own, which costs more than a few local compare-and-sets.
const minAtomicBatch = 8

// atomicBatch says whether n reservations for one node go in one atomic batch.
func (s *Service) atomicBatch(n int) bool {
	if !s.atomicAlloc || s.now().Sub(time.Unix(0, s.refusedAt.Load())) < atomicRetry {
		return false
	}
	return s.batches == batchAtomic || s.replicatedAlloc || n >= minAtomicBatch
}

// batchMode says how a node's group of reservations is written (reserveAll).
type batchMode int

const (
	batchAuto       batchMode = iota // atomic where the alloc bucket is replicated or the group large
	batchAtomic                      // always atomic
	batchSequential                  // one compare-and-set after another
)

// keyGroup is the handler of a worker's queued decisions: grouped by node unless perDecision.
func (s *Service) keyGroup() bus.GroupHandler {
	if s.perDecision {
		return nil
	}
	return s.handleDecisions
}

// decisionNode keys decisions by node, so one worker serializes a node's reservations in this replica.
// keyChecked routes every decision for a pod with inter-pod constraints of its own to one worker, so
// they are committed in the order the schedulers decided them (a scheduler publishes its decisions in
// that order): each then finds committed exactly the pods its replica had assumed, and the commit check
// refuses only what another replica's decisions changed. Checked commits are serial anyway.
const keyChecked = "\x00inter-pod"

// decisionMask is what the binder reads of a decision: all of it but the pod it carries, of which only
// the constraints that route the decision (hasRequiredInterPod). The binder binds the stored pod, never
// the decision's, so decoding the whole pod would be work thrown away.
var decisionMask = bus.NewMask(&pb.SchedulingDecision{}, "uid", "namespace", "name", "pod_revision", "node",
	"unschedulable", "message", "reasons", "scheduler", "score", "nodes_evaluated", "requests", "decided_at",
	"attempt", "nominated_node", "victims", "pod.spec.affinity", "pod.spec.topology_spread_constraints")

func decisionNode(m *bus.Msg) string {
	// A malformed one is parked by the handler, whichever worker gets it; a decoded one is kept for it.
	d := &pb.SchedulingDecision{}
	if pruned, ok := bus.Prune(m.Data, decisionMask); ok && proto.Unmarshal(pruned, d) == nil {
		m.Keep(d)
	}
	if p := d.GetPod(); p != nil && hasRequiredInterPod(p) {
		return keyChecked
	}
	if d.GetNode() == "" {
		return d.GetNominatedNode() // a preemption writes that node's record
	}
	return d.GetNode()
}

func deletedNode(m *bus.Msg) string {
	d := &pb.PodDeleted{}
	_ = proto.Unmarshal(m.Data, d)
	if d.GetNode() == "" {
		return d.GetNominatedNode()
	}
	return d.GetNode()
}

// handleDecision handles one pod.scheduled message.
func (s *Service) handleDecision(ctx context.Context, m *bus.Msg) error {
	d, err := decisionOf(m)
	if err != nil {
		return err
	}
	return s.decide(ctx, d, m.Position())
}

// decisionOf is the decision m carries, checked.
func decisionOf(m *bus.Msg) (*pb.SchedulingDecision, error) {
	d, ok := m.Kept().(*pb.SchedulingDecision) // decoded by decisionNode
	if !ok {
		d = &pb.SchedulingDecision{}
		if err := m.Decode(d); err != nil {
			return nil, err
		}
	}
	if d.GetUid() == "" || d.GetNamespace() == "" || d.GetName() == "" {
		return nil, fmt.Errorf("%w: decision without pod uid/namespace/name", bus.ErrMalformed)
	}
	if (d.GetNode() == "") != d.GetUnschedulable() {
		return nil, fmt.Errorf("%w: decision for %s/%s must name a node or be unschedulable, not both or neither",
			bus.ErrMalformed, d.GetNamespace(), d.GetName())
	}
	return d, nil
}

// handleCheckedDecisions handles the decisions for pods with inter-pod constraints of their own that
// arrived together, in the order the schedulers made them. Their checked reservations are made first,
// as one group (reserveCheckedGroup), so that they share one token round instead of taking one each:
// the token serializes checked commits, so its round trips bound their rate. Then the decisions are
// finished concurrently: those with a reservation bind and announce, while the rest (unschedulable
// ones, which may preempt, and those the group could not prepare) go one by one, in order.
func (s *Service) handleCheckedDecisions(ctx context.Context, ms []*bus.Msg) []error {
	errs := make([]error, len(ms))
	ds := make([]*pb.SchedulingDecision, len(ms))
	for i, m := range ms {
		ds[i], errs[i] = decisionOf(m)
	}
	// The stored pods, read at once: a decision's own pod body is never trusted (see decideWith).
	stored := make([]*storedPod, len(ms))
	var reads sync.WaitGroup
	for i, d := range ds {
		if d == nil {
			continue
		}
		reads.Go(func() {
			pod, rev, err := s.pod(ctx, bus.PodKey(d.GetNamespace(), d.GetName()))
			if err == nil {
				stored[i] = &storedPod{pod: pod, rev: rev}
			}
		})
	}
	reads.Wait()
	pre := make([]*checkReq, len(ms))
	var group []*checkReq
	for i, d := range ds {
		p := stored[i].get()
		if d == nil || p == nil || d.GetUnschedulable() || judge(p, d) != verdictAct || !s.view.concerns(p) {
			continue
		}
		if why, err := s.refusal(ctx, p, d); err != nil || why != "" {
			continue // decided alone, which refuses it
		}
		pre[i] = newCheckReq(d.GetNode(), p, checkedID(d, ms[i].Position()))
		group = append(group, pre[i])
	}
	if len(group) > 0 {
		s.reserveCheckedGroup(ctx, group)
	}
	var wg sync.WaitGroup
	for i, d := range ds {
		if d != nil && pre[i] != nil {
			wg.Go(func() { errs[i] = s.decideWith(ctx, d, ms[i].Position(), stored[i], pre[i]) })
		}
	}
	for i, d := range ds {
		if d != nil && pre[i] == nil {
			errs[i] = s.decideWith(ctx, d, ms[i].Position(), stored[i], nil)
		}
	}
	wg.Wait()
	return errs
}

// handleDeleted releases the reservation of a pod that left the store.
func (s *Service) handleDeleted(ctx context.Context, m *bus.Msg) error {
	d := &pb.PodDeleted{}
	if err := m.Decode(d); err != nil {
		return err
	}
	if d.GetUid() == "" {
		return fmt.Errorf("%w: pod.deleted without uid", bus.ErrMalformed)
	}
	// An unbound pod has no node: any reservation a decision made for it is released by that
	// decision's own re-check, which finds the pod gone. Its nomination, if any, goes now.
	if n := d.GetNominatedNode(); n != "" {
		if err := s.unnominate(ctx, n, d.GetUid()); err != nil {
			return err
		}
	}
	return s.release(ctx, d.GetNode(), d.GetUid())
}

// nodeCache is the latest value of every node, kept by a watch on the nodes bucket.
type nodeCache struct {
	mu    sync.RWMutex
	nodes map[string]*pb.Node // by KV key
}

func (c *nodeCache) get(key string) (*pb.Node, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.nodes[key]
	return n, ok
}

func (c *nodeCache) set(key string, n *pb.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n == nil {
		delete(c.nodes, key)
		return
	}
	c.nodes[key] = n
}

// node returns a node from the cache, or from the store when the cache has not seen it (yet): a decision
// can arrive before the watch delivers a node that was just added.
func (s *Service) node(ctx context.Context, name string) (*pb.Node, error) {
	key := bus.NodeKey(name)
	if n, ok := s.nodes.get(key); ok {
		return n, nil
	}
	n := &pb.Node{}
	if _, err := bus.Get(ctx, s.b.Nodes, key, n); err != nil {
		return nil, fmt.Errorf("read node %s: %w", name, err)
	}
	return n, nil
}

// watchNodes keeps the node cache until ctx is cancelled.
func (s *Service) watchNodes(ctx context.Context) error {
	w, err := s.b.Nodes.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("node watch closed")
			}
			if e == nil {
				continue // end of the initial values
			}
			if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
				s.nodes.set(e.Key(), nil)
				continue
			}
			n := &pb.Node{}
			if err := proto.Unmarshal(e.Value(), n); err != nil {
				s.log.Warn("undecodable node in store", "key", e.Key(), "err", err)
				continue
			}
			intern.Node(n)
			s.nodes.set(e.Key(), n)
		}
	}
}
