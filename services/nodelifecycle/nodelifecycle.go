// Package nodelifecycle taints nodes that are not Ready and evicts the pods that do not tolerate it, as
// kube-controller-manager's node-lifecycle and taint-eviction controllers do.
//
//	nodes bucket ──watch──▶ Ready False:   + not-ready   NoSchedule, NoExecute   (CAS on the node)
//	                        Ready Unknown: + unreachable NoSchedule, NoExecute
//	                        Ready True:    both removed
//	                        MemoryPressure, DiskPressure, PIDPressure, NetworkUnavailable True:
//	                                       + memory-pressure, ... NoSchedule (conditions.go)
//	pods bucket  ──watch──▶ a bound pod on a node with NoExecute taints it does not tolerate forever:
//	                        timer heap at taint.timeAdded + tolerationSeconds (now if not tolerated)
//	timer ──▶ token bucket (EvictionRate/s) ──▶ pod.cmd.delete reason TaintManagerEviction
//	                        (the store sets DisruptionTarget) + event TaintManagerEviction
//
// Replicas need no leader: node writes are compare-and-set against the revision watched, deletions
// and events carry one message id per pod, which the streams de-duplicate, and every deadline derives
// from stored times (the taint's timeAdded), so replicas agree on it.
package nodelifecycle

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/events"
	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// Defaults.
const (
	// DefaultEvictionRate is per replica: kube's 0.1/s per zone guards against a network partition
	// emptying a zone; podbus's simulated clusters lose whole pools at once and want them rescheduled
	// promptly, so the default is higher and the flag lowers it.
	DefaultEvictionRate = 10.0
	// User is who evictions are attributed to.
	User = "system:serviceaccount:kube-system:node-controller"
)

// Config configures one replica.
type Config struct {
	ID string
	// SharedWatches, when set, shares whole-bucket watches with the process's other services.
	SharedWatches *bus.WatchHub
	// EvictionRate is the evictions per second this replica makes at most (token bucket); default
	// DefaultEvictionRate.
	EvictionRate float64
	// EvictionBurst is the bucket's size; default max(1, EvictionRate).
	EvictionBurst int
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// now is the clock (tests).
	now func() time.Time
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("nodelifecycle: invalid config")

// Service is one replica.
type Service struct {
	cfg    Config
	conn   *bus.Conn
	pub    *bus.Publisher
	rec    *events.Recorder
	log    *slog.Logger
	limit  *tokenBucket
	nodesK jetstream.KeyValue

	nodes   map[string]*cachedNode // by node name
	pods    map[string]cachedPod   // by pod key
	byNode  map[string]map[string]bool
	pending map[string]time.Time // pod key -> eviction deadline (the heap's valid entries)
	timers  deadlines
	strs    *intern.Strings                 // namespaces and node names
	tols    *intern.Table[[]*pb.Toleration] // by their wire form

	session func(context.Context) error // one watch of both buckets: s.watch; tests replace it
}

type cachedNode struct {
	node *pb.Node
	key  string
	rev  uint64
}

// cachedPodMask is what a cachedPod keeps of a pod but its tolerations: the watch decodes only that
// of every change.
var cachedPodMask = bus.NewMask(&pb.Pod{}, "metadata.uid", "metadata.namespace", "metadata.name",
	"metadata.deletion_timestamp", "spec.node_name", "internal.correlation_id")

// tolerationsMask is a pod's tolerations: most pods have the same (those admission defaults), which
// the cache decodes and keeps once.
var tolerationsMask = bus.NewMask(&pb.Pod{}, "spec.tolerations")

// cachedPod is kept by value, its own strings in one: a full cluster's pods are each one entry in
// this cache, and the collector marks them all on every cycle.
type cachedPod struct {
	ids                  string           // uid, name and correlation id, end to end
	nameAt, corrAt       int32            // where the name and the correlation id start in ids
	ns, node             string           // interned
	tolerations          []*pb.Toleration // shared with every pod of the same: read only
	terminating, evicted bool
}

func newCachedPod(uid, name, correlation []byte) cachedPod {
	return cachedPod{ids: string(uid) + string(name) + string(correlation), nameAt: int32(len(uid)), corrAt: int32(len(uid) + len(name))}
}

func (c *cachedPod) uid() string         { return c.ids[:c.nameAt] }
func (c *cachedPod) name() string        { return c.ids[c.nameAt:c.corrAt] }
func (c *cachedPod) correlation() string { return c.ids[c.corrAt:] }

// New checks the configuration; Run opens the buckets.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if err := bus.CheckReplica(ErrConfig, cfg.ID, conn); err != nil {
		return nil, err
	}
	if cfg.EvictionRate < 0 || cfg.EvictionBurst < 0 {
		return nil, fmt.Errorf("%w: negative eviction rate or burst", ErrConfig)
	}
	if cfg.EvictionRate == 0 {
		cfg.EvictionRate = DefaultEvictionRate
	}
	if cfg.EvictionBurst == 0 {
		cfg.EvictionBurst = max(1, int(cfg.EvictionRate))
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	actor := "nodelifecycle/" + cfg.ID
	pub := bus.NewPublisher(conn.JS, actor)
	s := &Service{
		cfg:   cfg,
		conn:  conn,
		pub:   pub,
		rec:   events.NewRecorder(pub, "taint-eviction-controller", cfg.ID),
		log:   cfg.Logger.With("actor", actor),
		limit: newTokenBucket(cfg.EvictionRate, cfg.EvictionBurst),
		strs:  intern.NewStrings(intern.DefaultLimit),
		tols:  intern.NewTable[[]*pb.Toleration](intern.DefaultLimit),
	}
	s.reset()
	s.session = s.watch
	return s, nil
}

// Run taints nodes and evicts pods until ctx ends. All state belongs to this one goroutine. A
// bucket's watch that ends while running is opened again with fresh state, as an informer relists:
// the eviction deadlines derive from stored times, so they come back the same.
func (s *Service) Run(ctx context.Context) error {
	return bus.Relist(ctx, s.log, s.session, s.reset)
}

// reset empties the caches and the eviction deadlines: the state a session starts from.
func (s *Service) reset() {
	s.nodes = map[string]*cachedNode{}
	s.pods = map[string]cachedPod{}
	s.byNode = map[string]map[string]bool{}
	s.pending = map[string]time.Time{}
	s.timers = nil
}

// watch watches both buckets, taints and evicts until ctx ends or a watch does.
func (s *Service) watch(ctx context.Context) error {
	var err error
	if s.nodesK, err = bus.OpenBucket(ctx, s.conn.JS, bus.BucketNodes); err != nil {
		return fmt.Errorf("nodelifecycle: %w", err)
	}
	podsK, err := bus.OpenBucket(ctx, s.conn.JS, bus.BucketPods)
	if err != nil {
		return fmt.Errorf("nodelifecycle: %w", err)
	}
	s.nodesK, podsK = s.cfg.SharedWatches.Wrap(s.nodesK), s.cfg.SharedWatches.Wrap(podsK)
	nw, err := s.nodesK.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("nodelifecycle: watch nodes: %w", err)
	}
	defer func() { _ = nw.Stop() }()
	pw, err := podsK.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("nodelifecycle: watch pods: %w", err)
	}
	defer func() { _ = pw.Stop() }()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-nw.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil // stopped: the watch closes with the context
				}
				return fmt.Errorf("nodelifecycle: %w: nodes", bus.ErrWatchEnded)
			}
			if e != nil {
				s.onNode(ctx, e)
			}
		case e, ok := <-pw.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil // stopped: the watch closes with the context
				}
				return fmt.Errorf("nodelifecycle: %w: pods", bus.ErrWatchEnded)
			}
			if e != nil {
				s.onPod(e)
			}
		case <-timer.C:
			s.fire(ctx)
		}
		resetTimer(timer, s.next(), s.cfg.now())
	}
}

// resetTimer arms t for the earliest deadline (an hour when there is none).
func resetTimer(t *time.Timer, at time.Time, now time.Time) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	d := time.Hour
	if !at.IsZero() {
		d = max(0, at.Sub(now))
	}
	t.Reset(d)
}

func (s *Service) onNode(ctx context.Context, e jetstream.KeyValueEntry) {
	name, ok := bus.Untoken(e.Key())
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.nodes, name)
		s.evaluateNode(name)
		return
	}
	n := &pb.Node{}
	if err := proto.Unmarshal(e.Value(), n); err != nil {
		metrics.Count("nodelifecycle.malformed", 1)
		return
	}
	intern.Node(n)
	c := &cachedNode{node: n, key: e.Key(), rev: e.Revision()}
	s.nodes[name] = c
	if err := s.taint(ctx, c); err != nil && ctx.Err() == nil {
		s.log.Warn("taint node", "node", name, "err", err)
	}
	s.evaluateNode(name)
}

// lifecycleTaints are the taints this controller owns.
var lifecycleTaints = []struct{ key, effect string }{
	{podutil.TaintNodeNotReady, framework.TaintEffectNoSchedule},
	{podutil.TaintNodeNotReady, framework.TaintEffectNoExecute},
	{podutil.TaintNodeUnreachable, framework.TaintEffectNoSchedule},
	{podutil.TaintNodeUnreachable, framework.TaintEffectNoExecute},
}

// wantedTaintKey is the lifecycle taint key a node should carry ("" for none); ok is false for a node
// without a Ready condition (registered through the API, never heartbeating), which is left alone.
func wantedTaintKey(n *pb.Node) (key string, ok bool) {
	c := podutil.NodeCondition(n, podutil.NodeReady)
	if c == nil {
		return "", false
	}
	switch c.GetStatus() {
	case podutil.True:
		return "", true
	case podutil.False:
		return podutil.TaintNodeNotReady, true
	default:
		return podutil.TaintNodeUnreachable, true
	}
}

// taint brings the node's lifecycle taints in line with its Ready condition, and its condition taints
// with its other conditions (conditions.go): one compare-and-set at
// the watched revision. Losing it is fine: the watch brings the newer node, which is examined again.
func (s *Service) taint(ctx context.Context, c *cachedNode) error {
	want, ok := wantedTaintKey(c.node)
	if !ok {
		return nil
	}
	var kept []*pb.Taint
	have := map[string]bool{}
	changed := false
	wantCond, haveCond := wantedConditionTaints(c.node), map[string]bool{}
	for _, t := range c.node.GetSpec().GetTaints() {
		if isConditionTaint(t) {
			if !wantCond[t.GetKey()] {
				changed = true
				continue
			}
			haveCond[t.GetKey()] = true
		}
		if isLifecycle(t) {
			if t.GetKey() != want {
				changed = true
				continue
			}
			have[t.GetEffect()] = true
		}
		kept = append(kept, t)
	}
	now := timestamppb.New(s.cfg.now())
	for _, lt := range lifecycleTaints {
		if lt.key != want || have[lt.effect] {
			continue
		}
		t := &pb.Taint{Key: lt.key, Effect: lt.effect}
		if lt.effect == framework.TaintEffectNoExecute {
			t.TimeAdded = now
		}
		kept = append(kept, t)
		changed = true
	}
	for _, ct := range conditionTaints {
		if wantCond[ct.key] && !haveCond[ct.key] {
			kept = append(kept, &pb.Taint{Key: ct.key, Effect: framework.TaintEffectNoSchedule})
			changed = true
		}
	}
	if !changed {
		return nil
	}
	n := proto.Clone(c.node).(*pb.Node)
	if n.Spec == nil {
		n.Spec = &pb.NodeSpec{}
	}
	n.Spec.Taints = kept
	_, err := bus.Update(ctx, s.nodesK, c.key, n, c.rev)
	if errors.Is(err, bus.ErrConflict) {
		return nil
	}
	if err == nil {
		metrics.Count("nodelifecycle.taints.updated", 1)
		s.log.Info("node taints updated", "node", n.GetMetadata().GetName(), "taint", want)
	}
	return err
}

func isLifecycle(t *pb.Taint) bool {
	return t.GetKey() == podutil.TaintNodeNotReady || t.GetKey() == podutil.TaintNodeUnreachable
}

func (s *Service) onPod(e jetstream.KeyValueEntry) {
	key := e.Key()
	if old, ok := s.pods[key]; ok && old.node != "" {
		delete(s.byNode[old.node], key)
		if len(s.byNode[old.node]) == 0 {
			delete(s.byNode, old.node)
		}
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.pods, key)
		delete(s.pending, key)
		return
	}
	h, ok := readPodHead(e.Value())
	if !ok {
		metrics.Count("nodelifecycle.malformed", 1)
		return
	}
	tols, ok := s.tolerations(e.Value())
	if !ok {
		metrics.Count("nodelifecycle.malformed", 1)
		return
	}
	c := newCachedPod(h.uid, h.name, h.corr)
	c.ns, c.node = s.strs.Bytes(h.ns), s.strs.Bytes(h.node)
	c.tolerations, c.terminating = tols, h.deleting
	if old, ok := s.pods[key]; ok && old.uid() == c.uid() {
		c.evicted = old.evicted
	}
	s.pods[key] = c
	if c.node != "" {
		if s.byNode[c.node] == nil {
			s.byNode[c.node] = map[string]bool{}
		}
		s.byNode[c.node][key] = true
	}
	s.evaluate(key)
}

// tolerations are a stored pod's, decoded once for all pods with the same.
func (s *Service) tolerations(data []byte) ([]*pb.Toleration, bool) {
	wire, ok := bus.Prune(data, tolerationsMask)
	if !ok {
		return nil, false
	}
	if len(wire) == 0 {
		return nil, true
	}
	return s.tols.GetBytes(wire, func() ([]*pb.Toleration, bool) {
		p := &pb.Pod{}
		if proto.Unmarshal(wire, p) != nil {
			return nil, false
		}
		return p.GetSpec().GetTolerations(), true
	})
}

func (s *Service) evaluateNode(name string) {
	for key := range s.byNode[name] {
		s.evaluate(key)
	}
}

// evaluate schedules or cancels the eviction of one pod.
func (s *Service) evaluate(key string) {
	at, ok := s.deadline(key)
	if !ok {
		delete(s.pending, key)
		return
	}
	if cur, ok := s.pending[key]; ok && cur.Equal(at) {
		return
	}
	s.pending[key] = at
	heap.Push(&s.timers, deadline{at: at, key: key})
}

// deadline is when the pod is to be evicted; ok is false when it is not (no NoExecute taint on its
// node, or one it tolerates forever).
func (s *Service) deadline(key string) (time.Time, bool) {
	p, ok := s.pods[key]
	if !ok || p.node == "" || p.terminating || p.evicted {
		return time.Time{}, false
	}
	n := s.nodes[p.node]
	if n == nil {
		return time.Time{}, false
	}
	var at time.Time
	found := false
	for _, t := range n.node.GetSpec().GetTaints() {
		if t.GetEffect() != framework.TaintEffectNoExecute {
			continue
		}
		d, ok := taintDeadline(p.tolerations, t)
		if !ok {
			continue
		}
		if !found || d.Before(at) {
			at, found = d, true
		}
	}
	return at, found
}

// taintDeadline is when a pod with tolerations must leave a node with taint: at once when none
// tolerates it, after the shortest tolerationSeconds of those that do, never when none of them is
// bounded.
func taintDeadline(tolerations []*pb.Toleration, t *pb.Taint) (time.Time, bool) {
	added := t.GetTimeAdded().AsTime()
	if t.TimeAdded == nil {
		added = time.Time{} // unknown: as long ago as can be
	}
	matched := false
	var secs *int64
	for _, tol := range tolerations {
		if !framework.ToleratesTaint(tol, t) {
			continue
		}
		matched = true
		if tol.TolerationSeconds != nil && (secs == nil || tol.GetTolerationSeconds() < *secs) {
			v := max(0, tol.GetTolerationSeconds())
			secs = &v
		}
	}
	switch {
	case !matched:
		return added, true
	case secs == nil:
		return time.Time{}, false
	default:
		return added.Add(time.Duration(*secs) * time.Second), true
	}
}

// next is the earliest pending deadline, dropping stale heap entries.
func (s *Service) next() time.Time {
	for s.timers.Len() > 0 {
		top := s.timers[0]
		if at, ok := s.pending[top.key]; ok && at.Equal(top.at) {
			return top.at
		}
		heap.Pop(&s.timers)
	}
	return time.Time{}
}

// fire evicts the pods whose deadline passed, as fast as the token bucket allows.
func (s *Service) fire(ctx context.Context) {
	now := s.cfg.now()
	for {
		at := s.next()
		if at.IsZero() || at.After(now) {
			return
		}
		key := heap.Pop(&s.timers).(deadline).key
		delete(s.pending, key)
		if wait, ok := s.limit.take(now); !ok {
			metrics.Count("nodelifecycle.evictions.ratelimited", 1)
			s.pending[key] = now.Add(wait)
			heap.Push(&s.timers, deadline{at: now.Add(wait), key: key})
			continue
		}
		if err := s.evict(ctx, key, now); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("evict pod", "pod", key, "err", err)
			retry := now.Add(time.Second)
			s.pending[key] = retry
			heap.Push(&s.timers, deadline{at: retry, key: key})
		}
	}
}

// evict asks the store to delete the pod, as the API would, and records why. A pod of an unreachable
// node is deleted at once (grace 0): its agent cannot confirm a graceful stop, and when it comes back it
// stops what the store no longer binds to it. A not-ready node's agent still runs and stops it gracefully.
func (s *Service) evict(ctx context.Context, key string, now time.Time) error {
	p, ok := s.pods[key]
	if !ok {
		return nil // deleted since its deadline was set
	}
	uid, name := p.uid(), p.name()
	cmd := &pb.PodCommand{
		Op:   pb.PodCommand_OP_DELETE,
		Pod:  &pb.Pod{Metadata: &pb.ObjectMeta{Name: name, Namespace: p.ns, Uid: uid}},
		User: User, PreconditionUid: uid, Reason: podutil.ReasonTaintManagerEviction,
	}
	if n := s.nodes[p.node]; n != nil {
		if k, _ := wantedTaintKey(n.node); k == podutil.TaintNodeUnreachable {
			cmd.GracePeriodSeconds = proto.Int64(0)
		}
	}
	// One command and one event per pod however many replicas send them: message ids.
	err := s.pub.Publish(ctx, bus.SubjPodDelete, cmd, bus.Meta{
		MsgID: "taintevict-" + uid, Correlation: p.correlation(), PodUID: uid,
		Key: p.ns + "/" + name, User: User,
	})
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", key, err)
	}
	p.evicted = true
	s.pods[key] = p
	metrics.Count("nodelifecycle.evictions", 1)
	s.log.Info("evicting pod", "pod", p.ns+"/"+name, "node", p.node)
	obj := &pb.ObjectReference{Kind: "Pod", ApiVersion: "v1", Namespace: p.ns, Name: name, Uid: uid}
	f, err := s.rec.Event(obj, "Normal", podutil.ReasonTaintManagerEviction,
		fmt.Sprintf("Marking for deletion Pod %s/%s", p.ns, name), "taintevict-"+uid, now)
	if err != nil {
		return nil // the eviction stands; the event is best effort
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := bus.Wait(wctx, f); err != nil {
		s.log.Warn("record eviction event", "pod", key, "err", err)
	}
	return nil
}

type deadline struct {
	at  time.Time
	key string
}

// deadlines is a min-heap by time; entries not matching Service.pending are stale and skipped.
type deadlines []deadline

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlines) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlines) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlines) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// tokenBucket limits evictions: burst tokens, refilled at rate per second.
type tokenBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newTokenBucket(rate float64, burst int) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// take spends a token at now; without one, it says how long until there is one.
func (b *tokenBucket) take(now time.Time) (time.Duration, bool) {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return max(time.Millisecond, time.Duration((1-b.tokens)/b.rate*float64(time.Second))), false
}
