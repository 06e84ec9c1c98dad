// Package scheduler is podbus's scheduler service (docs/design.md step 3), built like kube-scheduler:
// a node cache fed by KV watches, a plugin framework run over an immutable snapshot per pod, and a
// decision published for the binder, which commits it (the scheduler never writes state itself, as
// Nomad's schedulers submit plans to an applier).
//
//	nodes KV ──watch──┐                        ┌─▶ pod.scheduled (node)          ─▶ binder
//	alloc KV ──watch──┼─▶ cache ─▶ snapshot ─▶ schedule ─┤  + assume the pod in the cache
//	(own assumptions)─┘      │                 └─▶ pod.scheduled (unschedulable) ─▶ binder
//	                         │                        + park the pod in the requeuer
//	                         └─ change that may help ─▶ requeuer ─▶ pod.pending.* (cause node-changed)
//
// All replicas share the durable consumer "scheduler" (pods without inter-pod constraints); the pods of
// a constraint group go to one of bus.PendingPartitions consumers, each pinned to one replica at a time.
// Each replica keeps its own cache and requeuer. Two replicas (or workers) may pick the same room: the
// binder's compare-and-set over the node's alloc keys refuses the loser, which comes back on its pending
// subject with cause "conflict".
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/cache"
	"github.com/podbus/podbus/sched/config"
	"github.com/podbus/podbus/sched/core"
)

// Config configures one scheduler replica.
type Config struct {
	ID string // replica identity, stamped on messages as "scheduler/<ID>"
	// SharedWatches, when set, shares whole-bucket watches with the process's other services.
	SharedWatches *bus.WatchHub
	// Workers handle pending pods concurrently, per pending consumer (default 32): the scheduling cycle
	// itself is serialized, waiting for decisions to be stored overlaps, and the decisions that wait
	// together are stored together (bus.Batcher). Messages of one pod go to one worker.
	Workers int
	// RequeueBackoff is the least time between two requeues of the same unschedulable pod (default 1s).
	RequeueBackoff time.Duration
	// PinnedTTL: after a replica stops pulling (it died), how long until its partitions of constrained
	// pods move to another replica (default 5s; below the consumers' ack wait, 10s, so a killed replica
	// delays no pod by more than the ack wait).
	PinnedTTL time.Duration
	// UnschedulableFlush is how long a pod may wait for a node, as the pods bucket says
	// (PodScheduled=False), before some replica sends it back to pod.pending whatever changed (default
	// 1m; kube-scheduler flushes its unschedulable pods after 5m). It is what takes over the pods a
	// replica that died or was scaled away had parked: every replica tracks every waiting pod, not only
	// those it judged, and all use the same message id, so the pod goes back once.
	UnschedulableFlush time.Duration
	// AssumeTTL bounds how long a decision counts on its node before the binder commits it (default 30s).
	AssumeTTL time.Duration
	// Profile changes scoring (zero: the default plugins, LeastAllocated); used when Profiles is empty.
	Profile config.Profile
	// Profiles, one per spec.schedulerName this replica serves. A pod whose schedulerName matches none
	// is left alone (acked, never decided), as kube-scheduler ignores other schedulers' pods; since the
	// replicas share one consumer, every replica must serve the same profiles.
	Profiles []config.Profile
	Logger   *slog.Logger
}

// ErrConfig is returned by New for an unusable configuration; it is config.ErrConfig, which a bad
// profile wraps too.
var ErrConfig = config.ErrConfig

// errCacheBehind: a requeued pod arrived before this replica's cache saw the change that requeued it.
var errCacheBehind = errors.New("node cache has not seen the change that requeued the pod yet")

// Service is one scheduler replica.
type Service struct {
	cfg   Config
	conn  *bus.Conn
	actor string
	pub   publisher
	log   *slog.Logger
	now   func() time.Time

	cache *cache.Cache
	algos map[string]*core.Algorithm // by schedulerName
	parks *requeuer
	waits *waiting
	// cycle makes snapshot → schedule → assume → send one atomic step, so concurrent workers never place
	// two pods in the same room and decisions reach the stream in the order they were made; waiting
	// for the stream to store a decision happens outside it, in parallel.
	cycle sync.Mutex

	ready    chan struct{} // closed once the cache holds the initial nodes and alloc records
	tracking chan struct{} // closed once the pods waiting for a node at start are parked
}

// profileFor returns the algorithm of the pod's profile, nil when this replica has none for it.
func (s *Service) profileFor(pod *pb.Pod) *core.Algorithm {
	name := pod.GetSpec().GetSchedulerName()
	if name == "" {
		name = config.DefaultSchedulerName
	}
	return s.algos[name]
}

// New returns a replica on conn. It does not touch the bus until Run.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("%w: ID is required", ErrConfig)
	}
	if conn == nil || conn.JS == nil {
		return nil, fmt.Errorf("%w: a connection is required", ErrConfig)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.RequeueBackoff <= 0 {
		cfg.RequeueBackoff = time.Second
	}
	if cfg.UnschedulableFlush <= 0 {
		cfg.UnschedulableFlush = time.Minute
	}
	if cfg.AssumeTTL <= 0 {
		cfg.AssumeTTL = cache.DefaultAssumeTTL
	}
	profiles := cfg.Profiles
	if len(profiles) == 0 {
		profiles = []config.Profile{cfg.Profile}
	}
	if err := config.Validate(profiles); err != nil {
		return nil, err
	}
	algos := make(map[string]*core.Algorithm, len(profiles))
	for _, p := range profiles {
		a, err := core.ForProfile(p)
		if err != nil {
			return nil, err
		}
		algos[p.Name()] = a
	}
	actor := "scheduler/" + cfg.ID
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("actor", actor)
	pub := bus.NewPublisher(conn.JS, actor)
	s := &Service{
		cfg:   cfg,
		conn:  conn,
		actor: actor,
		// Decisions made while earlier ones are being stored go out together, in decision order.
		pub:      bus.NewBatcher(conn.JS, actor),
		log:      log,
		now:      time.Now,
		cache:    cache.New(cache.Options{AssumeTTL: cfg.AssumeTTL}),
		algos:    algos,
		ready:    make(chan struct{}),
		waits:    newWaiting(),
		tracking: make(chan struct{}),
	}
	s.parks = newRequeuer(pub, cfg.RequeueBackoff, s.cache.Changes, log)
	return s, nil
}

// Run schedules pods until ctx is cancelled, then drains and returns nil.
func (s *Service) Run(ctx context.Context) error {
	b, err := bus.OpenBuckets(ctx, s.conn.JS)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	b = s.cfg.SharedWatches.WrapBuckets(b)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // every goroutine below ends with ctx
	defer metrics.RegisterPending("unschedulable", s.parks.Len)()
	goFn := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	nodesSynced, allocSynced := make(chan struct{}), make(chan struct{})
	nodesW, err := b.Nodes.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("scheduler: watch nodes: %w", err)
	}
	allocW, err := b.Alloc.WatchAll(ctx)
	if err != nil {
		_ = nodesW.Stop()
		return fmt.Errorf("scheduler: watch alloc: %w", err)
	}
	goFn(func() { s.watch(ctx, nodesW, nodesSynced, s.applyNode) })
	goFn(func() { s.watch(ctx, allocW, allocSynced, s.applyAlloc) })
	for _, ch := range []chan struct{}{nodesSynced, allocSynced} {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
	close(s.ready)

	podsW, err := s.loadUnschedulable(ctx, b.Pods)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	close(s.tracking)
	goFn(func() { s.trackWaiting(ctx, podsW) })
	goFn(func() { s.parks.run(ctx) })
	goFn(func() { every(ctx, max(s.cfg.UnschedulableFlush/4, 10*time.Millisecond), s.flushWaiting) })
	goFn(func() { s.expireAssumptions(ctx) })
	if err := s.watchDeleted(ctx, &wg); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	// Pods without inter-pod constraints are shared by all replicas through one consumer. Each partition
	// of constrained pods has a consumer pinned to one replica at a time (see bus.PendingPartitions),
	// and the replicas share those fairly (balance.go).
	key := func(m *bus.Msg) string { return m.Meta.PodUID }
	parts := make([]*partition, bus.PendingPartitions)
	for i := range parts {
		parts[i] = &partition{yield: make(chan struct{}, 1), spec: bus.ConsumerSpec{
			Stream:      bus.StreamPods,
			Durable:     bus.ConsumerSchedulerPartition(i),
			Filters:     []string{bus.SubjPodPendingGroup(i)},
			Workers:     s.cfg.Workers,
			Key:         key,
			Logger:      s.log,
			PinnedGroup: bus.PriorityGroupScheduler,
			PinnedTTL:   s.cfg.PinnedTTL,
		}}
	}
	m := newMembers(s.cfg.ID)
	goFn(func() {
		if err := s.announce(ctx, m); err != nil {
			s.log.Warn("no membership announcements; partitions stay where the server pinned them", "err", err)
		}
	})
	goFn(func() { s.balance(ctx, parts, m) })
	consumers := []func() error{func() error {
		return bus.Consume(ctx, s.conn.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: bus.ConsumerScheduler,
			Filters: []string{bus.SubjPodPending}, Workers: s.cfg.Workers, Key: key, Logger: s.log}, s.handlePending)
	}}
	for _, p := range parts {
		consumers = append(consumers, func() error { return s.servePartition(ctx, p) })
	}
	errs := make(chan error, len(consumers))
	for _, run := range consumers {
		goFn(func() {
			err := run()
			if err != nil {
				cancel() // a replica that lost one of its consumers stops, to be restarted whole
			}
			errs <- err
		})
	}
	var first error
	for range consumers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// watch applies a bucket's entries to the cache; synced is closed after the initial values.
func (s *Service) watch(ctx context.Context, w jetstream.KeyWatcher, synced chan struct{}, apply func(jetstream.KeyValueEntry, bool)) {
	defer func() { _ = w.Stop() }()
	initial := true
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // end of the initial values
				if initial {
					initial = false
					close(synced)
				}
				continue
			}
			apply(e, initial)
		}
	}
}

// applyNode feeds a nodes-bucket entry to the cache and requeues on a change that may help.
func (s *Service) applyNode(e jetstream.KeyValueEntry, initial bool) {
	name, ok := bus.Untoken(e.Key())
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		s.cache.RemoveNode(name, e.Revision())
		return
	}
	n := &pb.Node{}
	if err := decodeEntry(e, n); err != nil {
		s.log.Warn("ignoring node entry", "key", e.Key(), "err", err)
		return
	}
	intern.Node(n)
	if n.GetMetadata().GetName() == "" {
		if n.Metadata == nil {
			n.Metadata = &pb.ObjectMeta{}
		}
		n.Metadata.Name = name
	}
	if ch := s.cache.UpsertNodeChange(n, e.Revision()); ch.Trigger != "" && !initial {
		s.parks.Trigger(ch)
	}
}

// applyAlloc feeds an alloc-bucket entry, one pod's key or a node's meta key (bus.BucketAlloc), to the
// cache and requeues when pods left a node.
func (s *Service) applyAlloc(e jetstream.KeyValueEntry, initial bool) {
	node, uid, ok := bus.SplitAllocKey(e.Key())
	if !ok {
		return
	}
	var ch cache.Change
	switch put := e.Operation() == jetstream.KeyValuePut; {
	case uid == "" && put:
		meta := &pb.NodeAllocation{}
		if err := decodeEntry(e, meta); err != nil {
			s.log.Warn("ignoring alloc entry", "key", e.Key(), "err", err)
			return
		}
		ch = s.cache.ApplyNodeMeta(node, meta, e.Revision())
	case uid == "":
		ch = s.cache.ApplyNodeMeta(node, nil, e.Revision())
	case put:
		pa := &pb.PodAllocation{}
		if err := decodeEntry(e, pa); err != nil {
			s.log.Warn("ignoring alloc entry", "key", e.Key(), "err", err)
			return
		}
		intern.PodAllocation(pa) // the cache keeps it as long as the pod runs
		ch = s.cache.ApplyPodAlloc(node, uid, pa, e.Revision())
	default:
		ch = s.cache.ApplyPodAlloc(node, uid, nil, e.Revision())
	}
	if ch.Trigger != "" && !initial {
		s.parks.Trigger(ch)
	}
}

// loadUnschedulable parks the pods that wait for a node (unbound, PodScheduled=False), so a restarted or
// new replica picks them up, and makes them due at once: changes may have happened while no replica
// was watching. Replicas starting on the same state use the same trigger, so each pod goes back once.
// It returns the watcher after its initial values, for trackWaiting.
func (s *Service) loadUnschedulable(ctx context.Context, pods jetstream.KeyValue) (jetstream.KeyWatcher, error) {
	w, err := pods.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("scheduler: list pods: %w", err)
	}
	nodesRev, allocRev := s.cache.Revisions()
	trigger := fmt.Sprintf("s%d-%d", nodesRev, allocRev)
	n := 0
	for {
		select {
		case <-ctx.Done():
			_ = w.Stop()
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("scheduler: list pods: watcher closed")
			}
			if e == nil {
				if n > 0 {
					s.log.Info("requeueing unschedulable pods found at start", "pods", n)
				}
				return w, nil
			}
			if p := s.waits.apply(e, s.now()); p != nil {
				s.parks.AddDue(p, e.Revision(), trigger)
				n++
			}
		}
	}
}

// trackWaiting keeps the set of pods waiting for a node current, until ctx ends.
func (s *Service) trackWaiting(ctx context.Context, w jetstream.KeyWatcher) {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() == nil {
					s.log.Error("pods watch closed; unschedulable pods parked by other replicas are no longer taken over")
				}
				return
			}
			if e != nil {
				s.waits.apply(e, s.now())
			}
		}
	}
}

// flushWaiting sends back to pod.pending the pods that have waited for a node longer than
// UnschedulableFlush. The trigger names the pod's revision and the flush period, so every replica
// flushing the same pod in the same period sends the same message id.
func (s *Service) flushWaiting() {
	now := s.now()
	flush := s.cfg.UnschedulableFlush
	for _, w := range s.waits.due(now, flush) {
		period := now.UnixNano() / int64(flush)
		s.parks.AddDue(w.pod, w.rev, fmt.Sprintf("w%d.%d", w.rev, period))
		metrics.Count("scheduler.unschedulable_flushed", 1)
	}
}

// waiting is every pod that waits for a node according to the pods bucket, whichever replica judged
// it, with the time this replica last saw it change or flushed it.
type waiting struct {
	mu   sync.Mutex
	pods map[string]*waitingPod // by bucket key
}

type waitingPod struct {
	pod   *pb.Pod
	rev   uint64
	since time.Time
}

func newWaiting() *waiting { return &waiting{pods: map[string]*waitingPod{}} }

// apply records a pods-bucket entry and returns the pod when it waits for a node.
func (w *waiting) apply(e jetstream.KeyValueEntry, now time.Time) *pb.Pod {
	var p *pb.Pod
	if e.Operation() == jetstream.KeyValuePut && waitsForNodeWire(e.Value()) {
		p = &pb.Pod{}
		if err := decodeEntry(e, p); err != nil || !waitsForNode(p) {
			p = nil
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p == nil {
		delete(w.pods, e.Key())
		return nil
	}
	w.pods[e.Key()] = &waitingPod{pod: p, rev: e.Revision(), since: now}
	return p
}

// due returns the pods that waited at least flush, and starts their wait again.
func (w *waiting) due(now time.Time, flush time.Duration) []waitingPod {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []waitingPod
	for _, p := range w.pods {
		if now.Sub(p.since) >= flush {
			out = append(out, *p)
			p.since = now
		}
	}
	return out
}

// waitsMask is what waitsForNode reads of a pod.
var waitsMask = bus.NewMask(&pb.Pod{}, "metadata.deletion_timestamp", "status.phase",
	"status.conditions.type", "status.conditions.status")

// waitsForNodeWire is waitsForNode of a stored pod's wire form. Almost every change of a pod is not a
// wait, and the watch sees them all: those are read from the wire form (mayWaitForNode), and only a pod
// that may wait is decoded, the fields waitsForNode reads alone. Malformed data is no wait.
func waitsForNodeWire(data []byte) bool {
	return mayWaitForNode(data) && waitsForNodeDecoded(data)
}

// waitsForNodeDecoded is waitsForNode of the fields it reads, decoded from a stored pod's wire form.
func waitsForNodeDecoded(data []byte) bool {
	pruned, ok := bus.Prune(data, waitsMask)
	if !ok {
		return false
	}
	p := &pb.Pod{}
	return proto.Unmarshal(pruned, p) == nil && waitsForNode(p)
}

// waitsForNode: not bound by a binder, not being deleted, and judged unschedulable (PodScheduled=False).
// A pod created with spec.nodeName that did not fit its node waits the same way.
func waitsForNode(p *pb.Pod) bool {
	if p.GetMetadata().GetDeletionTimestamp() != nil || podutil.IsTerminal(p) {
		return false
	}
	c := podutil.PodCondition(p, podutil.PodScheduled)
	return c != nil && c.GetStatus() == podutil.False
}

// watchDeleted drops deleted pods from the assumptions and the parked set (an ordered, ephemeral
// consumer: every replica needs every deletion, and only those from now on).
func (s *Service) watchDeleted(ctx context.Context, wg *sync.WaitGroup) error {
	cons, err := s.conn.JS.OrderedConsumer(ctx, bus.StreamPods, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.SubjPodDeleted},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return fmt.Errorf("scheduler: watch %s: %w", bus.SubjPodDeleted, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		d := &pb.PodDeleted{}
		uid := m.Headers().Get(bus.HdrPodUID)
		if err := decodeData(m.Data(), d); err == nil && d.GetUid() != "" {
			uid = d.GetUid()
		}
		if uid != "" {
			s.cache.Forget(uid)
			s.parks.Remove(uid)
		}
	})
	if err != nil {
		return fmt.Errorf("scheduler: watch %s: %w", bus.SubjPodDeleted, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		cc.Stop()
	}()
	return nil
}

// expireAssumptions drops assumptions the binder never committed.
func (s *Service) expireAssumptions(ctx context.Context) {
	every(ctx, time.Second, func() {
		if n := s.cache.Cleanup(); n > 0 {
			metrics.Count("scheduler.assumptions_expired", int64(n))
		}
	})
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// Ready is closed once the replica's cache holds the initial nodes and alloc records.
func (s *Service) Ready() <-chan struct{} { return s.ready }
