// Package workloads runs the ReplicaSet and Deployment controllers, as kube-controller-manager's do, on
// the bus: any number of replicas, no leader.
//
//	replicasets, deployments, pods buckets ──watch──▶ caches ──▶ queue (owner keys) ◀── resync
//	                                                                │
//	ReplicaSet ns/name: 1. read the ReplicaSet (its revision r)     ▼ workers
//	                    2. count its pods (cache) and the pods it expects (its podbus.io/expected annotation)
//	                    3. decide creations (names from slots) and deletions; write status and the
//	                       expectations into the ReplicaSet, compare-and-set on r
//	                    4. only then: pod.cmd.create / pod.cmd.delete to the store, events
//	Deployment ns/name: new ReplicaSet (pod-template-hash), revisions, RollingUpdate or Recreate by
//	                    scaling ReplicaSets (compare-and-set on the revision each decision read), old
//	                    ReplicaSets beyond revisionHistoryLimit deleted, status and conditions.
//
// Every decision to create or delete pods is claimed by a compare-and-set on the ReplicaSet it concerns,
// so of several replicas deciding from the same ReplicaSet revision one acts and the others re-read and
// find the claim; a claim names the pods-bucket revision its writer had seen, so a reader acts only
// once its pod cache is that fresh. See docs/design.md, "Workload controllers".
package workloads

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/events"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Defaults.
const (
	DefaultResync  = 5 * time.Second
	DefaultWorkers = 4
	// DefaultClaimTTL is how long a claimed creation or deletion is expected before it is decided again
	// (the replica that claimed it may have stopped before sending it).
	DefaultClaimTTL = 20 * time.Second
	// Users the pod commands are attributed to, as kube's controllers' service accounts.
	UserReplicaSet = "system:serviceaccount:kube-system:replicaset-controller"
	UserDeployment = "system:serviceaccount:kube-system:deployment-controller"
	// ReasonScaleDown is the reason of a ReplicaSet's pod deletions (it deletes only pods beyond its
	// replicas), for the audit timeline.
	ReasonScaleDown = "ScaleDown"
)

// Config configures one replica.
type Config struct {
	ID string
	// SharedWatches, when set, shares whole-bucket watches with the process's other services.
	SharedWatches *bus.WatchHub
	// Resync re-examines every object this often (availability after minReadySeconds, progress deadlines,
	// expired claims). Default DefaultResync.
	Resync time.Duration
	// Workers sync that many objects at once. Default DefaultWorkers.
	Workers int
	// ClaimTTL: default DefaultClaimTTL.
	ClaimTTL time.Duration
	// MaxCreatesPerSync bounds the pods one sync of a ReplicaSet creates. Default 500.
	MaxCreatesPerSync int
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// now is the clock (tests).
	now func() time.Time
	// barrierWait bounds how long a sync waits for its ReplicaSets cache to catch up with the store
	// (tests shorten it). Default 5 s.
	barrierWait time.Duration
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("workloads: invalid config")

// errRequeue: the object must be synced again soon (a lost compare-and-set, a cache behind a claim).
var errRequeue = errors.New("requeue")

// errStale: a decision that adds pods was about to rest on a ReplicaSets cache that may be behind the
// store; the sync runs again after a read barrier.
var errStale = errors.New("replicasets cache not known to be fresh")

// Service is one replica of the workload controllers.
type Service struct {
	cfg  Config
	conn *bus.Conn
	pub  *bus.Publisher
	rsEv *events.Recorder
	dEv  *events.Recorder
	log  *slog.Logger

	pods, rsKV, dKV, nsKV jetstream.KeyValue

	c         *cache
	queue     *queue
	ready     chan struct{}
	readyOnce sync.Once
}

// New checks the configuration; Run opens the buckets.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if cfg.ID == "" || strings.ContainsAny(cfg.ID, ".*> \t") {
		return nil, fmt.Errorf("%w: ID %q must be one subject token", ErrConfig, cfg.ID)
	}
	if conn == nil || conn.NC == nil || conn.JS == nil {
		return nil, fmt.Errorf("%w: no bus connection", ErrConfig)
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.barrierWait <= 0 {
		cfg.barrierWait = 5 * time.Second
	}
	if cfg.ClaimTTL <= 0 {
		cfg.ClaimTTL = DefaultClaimTTL
	}
	if cfg.MaxCreatesPerSync <= 0 {
		cfg.MaxCreatesPerSync = 500
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	pub := bus.NewPublisher(conn.JS, "workloads/"+cfg.ID)
	return &Service{
		cfg:   cfg,
		conn:  conn,
		pub:   pub,
		rsEv:  events.NewRecorder(pub, "replicaset-controller", cfg.ID),
		dEv:   events.NewRecorder(pub, "deployment-controller", cfg.ID),
		log:   logger.With("actor", "workloads/"+cfg.ID),
		c:     newCache(),
		queue: newQueue(),
		ready: make(chan struct{}),
	}, nil
}

// Ready is closed once the caches hold every bucket's current state.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Run runs the controllers until ctx ends. A bucket's watch that ends while running (see
// bus.ErrWatchEnded) is opened again with fresh caches, as an informer relists.
func (s *Service) Run(ctx context.Context) error {
	return bus.Relist(ctx, s.log, s.run, func() { s.c, s.queue = newCache(), newQueue() })
}

func (s *Service) run(ctx context.Context) error {
	// The watches run on the context the loop below checks when one of them closes: one opened on the
	// caller's could close while the cancel is still on its way to this one.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var err error
	for _, b := range []struct {
		name string
		dst  *jetstream.KeyValue
	}{{bus.BucketPods, &s.pods}, {bus.BucketReplicaSets, &s.rsKV}, {bus.BucketDeployments, &s.dKV}, {bus.BucketNamespaces, &s.nsKV}} {
		if *b.dst, err = bus.OpenBucket(ctx, s.conn.JS, b.name); err != nil {
			return fmt.Errorf("workloads: %w", err)
		}
		*b.dst = s.cfg.SharedWatches.Wrap(*b.dst)
	}
	pw, err := s.pods.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("workloads: watch pods: %w", err)
	}
	defer func() { _ = pw.Stop() }()
	rw, err := s.rsKV.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("workloads: watch replicasets: %w", err)
	}
	defer func() { _ = rw.Stop() }()
	dw, err := s.dKV.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("workloads: watch deployments: %w", err)
	}
	defer func() { _ = dw.Stop() }()

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	started := false
	loaded := 0
	resync := time.NewTicker(s.cfg.Resync)
	defer resync.Stop()
	flush := time.NewTicker(50 * time.Millisecond)
	defer flush.Stop()
	startWorkers := func() {
		if started || loaded < 3 {
			return
		}
		started = true
		s.readyOnce.Do(func() { close(s.ready) })
		s.enqueueAll()
		for range s.cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.work(ctx)
			}()
		}
	}
	for {
		select {
		case <-ctx.Done():
			s.queue.close()
			return nil
		case e, ok := <-pw.Updates():
			if !ok {
				s.queue.close()
				if ctx.Err() != nil {
					return nil // stopped: the watch closes with the context
				}
				return fmt.Errorf("workloads: %w: pods", bus.ErrWatchEnded)
			}
			if e == nil {
				loaded++
				startWorkers()
				continue
			}
			s.onPod(e)
		case e, ok := <-rw.Updates():
			if !ok {
				s.queue.close()
				if ctx.Err() != nil {
					return nil // stopped: the watch closes with the context
				}
				return fmt.Errorf("workloads: %w: replicasets", bus.ErrWatchEnded)
			}
			if e == nil {
				loaded++
				startWorkers()
				continue
			}
			s.onReplicaSet(e)
		case e, ok := <-dw.Updates():
			if !ok {
				s.queue.close()
				if ctx.Err() != nil {
					return nil // stopped: the watch closes with the context
				}
				return fmt.Errorf("workloads: %w: deployments", bus.ErrWatchEnded)
			}
			if e == nil {
				loaded++
				startWorkers()
				continue
			}
			s.onDeployment(e)
		case <-flush.C:
			s.queue.flush()
		case <-resync.C:
			if started {
				s.enqueueAll()
			}
		}
	}
}

// Keys in the queue: kind prefix and ns/name.
const (
	qRS  = "rs/"
	qDep = "deploy/"
)

func (s *Service) work(ctx context.Context) {
	for {
		key, ok := s.queue.get(ctx)
		if !ok {
			return
		}
		var err error
		switch {
		case strings.HasPrefix(key, qRS):
			ns, name, _ := strings.Cut(strings.TrimPrefix(key, qRS), "/")
			err = s.syncReplicaSet(ctx, ns, name)
		case strings.HasPrefix(key, qDep):
			ns, name, _ := strings.Cut(strings.TrimPrefix(key, qDep), "/")
			err = s.syncDeployment(ctx, ns, name)
		}
		s.queue.done(key)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, errRequeue), errors.Is(err, bus.ErrConflict):
			metrics.Count("workloads.requeue", 1)
			s.queue.addAfter(ctx, key, 50*time.Millisecond)
		default:
			s.log.Warn("sync", "key", key, "err", err)
			s.queue.addAfter(ctx, key, time.Second)
		}
	}
}

func (s *Service) enqueueAll() {
	s.c.mu.Lock()
	var keys []string
	for k := range s.c.rs {
		keys = append(keys, qRS+k)
	}
	for k := range s.c.deploys {
		keys = append(keys, qDep+k)
	}
	s.c.mu.Unlock()
	for _, k := range keys {
		s.queue.add(k)
	}
}

func (s *Service) onPod(e jetstream.KeyValueEntry) {
	ns, name, ok := bus.SplitPodKey(e.Key())
	if !ok {
		return
	}
	key := ns + "/" + name
	var p *cachedPod
	if e.Operation() == jetstream.KeyValuePut {
		if p, ok = decodeCached(e.Value()); !ok {
			metrics.Count("workloads.malformed", 1)
			return
		}
	}
	old := s.c.setPod(key, ns, p, e.Revision())
	for _, q := range s.podOwners(ns, old, p) {
		s.queue.addSoon(q)
	}
}

// podOwners are the queue keys of the ReplicaSets a pod change concerns: its controller, before and
// after, or, for an orphan, every ReplicaSet of its namespace that selects it.
func (s *Service) podOwners(ns string, pods ...*cachedPod) []string {
	var out []string
	for _, p := range pods {
		if p == nil {
			continue
		}
		if ref := p.controllerRef(); ref != nil {
			if ref.kind == "ReplicaSet" {
				out = append(out, qRS+ns+"/"+ref.name)
			}
			continue
		}
		s.c.mu.Lock()
		for k, r := range s.c.rs {
			if r.obj.Namespace == ns && selects(r.obj.Spec.Selector, p.labels) {
				out = append(out, qRS+k)
			}
		}
		s.c.mu.Unlock()
	}
	return out
}

func (s *Service) onReplicaSet(e jetstream.KeyValueEntry) {
	ns, name, ok := bus.SplitPodKey(e.Key())
	defer s.c.sawRS(ns, e.Revision())
	if !ok {
		return
	}
	key := ns + "/" + name
	var r *rsEntry
	if e.Operation() == jetstream.KeyValuePut {
		rs := &appsv1.ReplicaSet{}
		t, err := workload.Decode(e.Value(), rs)
		if err != nil {
			metrics.Count("workloads.malformed", 1)
			return
		}
		r = &rsEntry{obj: rs, template: t, rev: e.Revision()}
	}
	old := s.c.setRS(key, r)
	s.queue.add(qRS + key)
	for _, x := range []*rsEntry{old, r} {
		if x == nil {
			continue
		}
		s.c.mu.Lock()
		obj := x.obj // a Deployment's sync may replace it (dsync.writeRS)
		s.c.mu.Unlock()
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
			if ref.Kind == "Deployment" {
				s.queue.add(qDep + ns + "/" + ref.Name)
			}
			continue
		}
		s.c.mu.Lock()
		for k, d := range s.c.deploys {
			if d.obj.Namespace == ns && selects(d.obj.Spec.Selector, obj.Labels) {
				s.queue.add(qDep + k)
			}
		}
		s.c.mu.Unlock()
	}
}

func (s *Service) onDeployment(e jetstream.KeyValueEntry) {
	ns, name, ok := bus.SplitPodKey(e.Key())
	if !ok {
		return
	}
	key := ns + "/" + name
	var d *dEntry
	if e.Operation() == jetstream.KeyValuePut {
		obj := &appsv1.Deployment{}
		t, err := workload.Decode(e.Value(), obj)
		if err != nil {
			metrics.Count("workloads.malformed", 1)
			return
		}
		d = &dEntry{obj: obj, template: t, rev: e.Revision()}
	}
	s.c.setDeployment(key, d)
	s.queue.add(qDep + key)
}

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return false
	}
	return s.Matches(labels.Set(l))
}

func controllerRefPB(refs []*pb.OwnerReference) *pb.OwnerReference {
	for _, r := range refs {
		if r.GetController() {
			return r
		}
	}
	return nil
}

// namespaceOpen reports whether pods may be created in ns: it exists and is not terminating (the API
// refuses the same creations, which the store's command path does not check).
func (s *Service) namespaceOpen(ctx context.Context, ns string) (bool, error) {
	data, _, err := bus.GetEncoded(ctx, s.nsKV, bus.NodeKey(ns))
	if errors.Is(err, bus.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var n struct {
		Metadata struct {
			DeletionTimestamp *metav1.Time `json:"deletionTimestamp"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &n); err != nil {
		return false, fmt.Errorf("namespace %s: %w", ns, errors.Join(bus.ErrMalformed, err))
	}
	return n.Metadata.DeletionTimestamp == nil, nil
}
