// Package namespaces is the namespace controller: it finishes the deletion of namespaces that the API
// marked terminating, as kube-controller-manager's namespace controller does.
//
//	namespaces bucket ──watch──▶ terminating? ──▶ queue ◀── pods bucket watch of the terminating
//	                                                │       namespaces' pods (one changed or went), resync
//	                                                ▼
//	finalize(ns): 1. each pod not yet terminating: pod.cmd.delete (the API's path: the store marks it,
//	                 the agent stops its containers, the status service removes it); wait for them
//	              2. every object of the other namespaced buckets (configmaps): delete, compare-and-set
//	              3. the namespace's events: purged from the EVENTS stream
//	              4. the kubernetes finalizer: removed; none left: the namespace record is deleted (CAS)
//
// Every step is idempotent and every write a compare-and-set (or a de-duplicated command), so several
// replicas may finalize the same namespace at once: a replica that loses a race re-reads and goes on.
package namespaces

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Defaults.
const (
	DefaultResync = 10 * time.Second
	// User is who the pod deletions are attributed to.
	User = "system:serviceaccount:kube-system:namespace-controller"
)

// Config configures one controller replica.
type Config struct {
	ID string
	// Buckets are the buckets of namespaced objects, other than pods, emptied with their namespace
	// (admission.NamespacedBuckets). Empty: configmaps.
	Buckets []string
	// Resync re-examines every terminating namespace this often, in case an event was missed.
	Resync time.Duration
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("namespaces: invalid config")

// errPending: the namespace still has pods on their way out; a change of the pods bucket re-queues it.
var errPending = errors.New("pods still terminating")

// Service is one namespace controller replica.
type Service struct {
	cfg  Config
	conn *bus.Conn
	pub  *bus.Publisher
	log  *slog.Logger

	namespaces, pods jetstream.KeyValue
	others           []jetstream.KeyValue

	mu          sync.Mutex
	terminating map[string]bool // namespaces seen terminating
	queued      map[string]bool
	wake        chan struct{}
}

// New checks the configuration; Run opens the buckets.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if err := bus.CheckReplica(ErrConfig, cfg.ID, conn); err != nil {
		return nil, err
	}
	if len(cfg.Buckets) == 0 {
		cfg.Buckets = []string{bus.BucketConfigMaps}
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{
		cfg:         cfg,
		conn:        conn,
		pub:         bus.NewPublisher(conn.JS, "namespaces/"+cfg.ID),
		log:         logger.With("actor", "namespaces/"+cfg.ID),
		terminating: map[string]bool{},
		queued:      map[string]bool{},
		wake:        make(chan struct{}, 1),
	}, nil
}

// Run finalizes terminating namespaces until ctx ends. A namespaces watch that ends while running is
// opened again with fresh state, as an informer relists.
func (s *Service) Run(ctx context.Context) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	return bus.Relist(ctx, s.log, s.watch, s.reset)
}

// reset forgets the terminating namespaces: the state a session starts from.
func (s *Service) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.terminating, s.queued = map[string]bool{}, map[string]bool{}
}

// watch follows the namespaces and the pods of terminating ones, and finalizes them, until ctx ends
// or the namespaces watch does.
func (s *Service) watch(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // the worker ends with ctx
	nsw, err := s.namespaces.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("namespaces: watch namespaces: %w", err)
	}
	defer func() { _ = nsw.Stop() }()
	var pods podWatch
	defer pods.stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.work(ctx)
	}()
	resync := time.NewTicker(s.cfg.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-nsw.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil // stopped: the watch closes with the context
				}
				return fmt.Errorf("namespaces: %w: namespaces", bus.ErrWatchEnded)
			}
			if e != nil {
				s.onNamespace(e)
			}
			s.followPods(ctx, &pods)
		case e, ok := <-pods.updates():
			if !ok {
				pods.stop() // watched again at the next resync
				continue
			}
			if e == nil {
				continue
			}
			if ns, _, ok := bus.SplitPodKey(e.Key()); ok {
				s.enqueueIfTerminating(ns)
			}
		case <-resync.C:
			s.followPods(ctx, &pods)
			s.requeueTerminating()
		}
	}
}

func (s *Service) open(ctx context.Context) error {
	var err error
	if s.namespaces, err = bus.OpenBucket(ctx, s.conn.JS, bus.BucketNamespaces); err != nil {
		return fmt.Errorf("namespaces: %w", err)
	}
	if s.pods, err = bus.OpenBucket(ctx, s.conn.JS, bus.BucketPods); err != nil {
		return fmt.Errorf("namespaces: %w", err)
	}
	s.others = nil
	for _, name := range s.cfg.Buckets {
		kv, err := bus.OpenBucket(ctx, s.conn.JS, name)
		if err != nil {
			return fmt.Errorf("namespaces: %w", err)
		}
		s.others = append(s.others, kv)
	}
	return nil
}

// podWatch watches the pods of the terminating namespaces, and nothing while none is: the controller
// needs no other pod's changes, and a cluster makes several per pod.
type podWatch struct {
	w          jetstream.KeyWatcher // nil: not watching
	namespaces []string             // those w follows, sorted
}

// updates is nil (never ready) while nothing is watched.
func (p *podWatch) updates() <-chan jetstream.KeyValueEntry {
	if p.w == nil {
		return nil
	}
	return p.w.Updates()
}

func (p *podWatch) stop() {
	if p.w != nil {
		_ = p.w.Stop()
	}
	p.w, p.namespaces = nil, nil
}

// followPods makes p watch the pods of the namespaces terminating now. A new watch starts from now, so
// every terminating namespace is queued again for what the change of watches may have hidden; a watch
// that cannot start is tried again at the next resync.
func (s *Service) followPods(ctx context.Context, p *podWatch) {
	s.mu.Lock()
	want := slices.Sorted(maps.Keys(s.terminating))
	s.mu.Unlock()
	if p.w != nil && slices.Equal(want, p.namespaces) {
		return
	}
	p.stop()
	if len(want) == 0 {
		return
	}
	filters := make([]string, len(want))
	for i, ns := range want {
		filters[i] = bus.PodKeyPrefix(ns)
	}
	// Only changes matter (a pod of a terminating namespace updated or gone); keys and operations suffice.
	w, err := bus.WatchUpdates(ctx, s.pods, filters, jetstream.MetaOnly())
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("watch the terminating namespaces' pods; retrying at the next resync", "err", err)
		}
		return
	}
	p.w, p.namespaces = w, want
	s.requeueTerminating()
}

func (s *Service) requeueTerminating() {
	s.mu.Lock()
	for ns := range s.terminating {
		s.queued[ns] = true
	}
	s.mu.Unlock()
	s.signal()
}

// onNamespace tracks which namespaces are terminating and queues them.
func (s *Service) onNamespace(e jetstream.KeyValueEntry) {
	name, ok := bus.Untoken(e.Key())
	if !ok {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		s.mu.Lock()
		delete(s.terminating, name)
		s.mu.Unlock()
		return
	}
	n, err := decodeNamespace(e.Value())
	if err != nil {
		metrics.Count("namespaces.malformed", 1)
		return
	}
	if n.DeletionTimestamp == nil {
		return
	}
	s.mu.Lock()
	s.terminating[name] = true
	s.queued[name] = true
	s.mu.Unlock()
	s.signal()
}

func (s *Service) enqueueIfTerminating(ns string) {
	s.mu.Lock()
	t := s.terminating[ns]
	if t {
		s.queued[ns] = true
	}
	s.mu.Unlock()
	if t {
		s.signal()
	}
}

func (s *Service) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// work finalizes queued namespaces one at a time; a failure is retried at the next resync.
func (s *Service) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		for {
			s.mu.Lock()
			var next string
			for ns := range s.queued {
				next = ns
				break
			}
			delete(s.queued, next)
			s.mu.Unlock()
			if next == "" {
				break
			}
			err := s.finalize(ctx, next)
			switch {
			case err == nil, errors.Is(err, errPending):
			case ctx.Err() != nil:
				return
			default:
				s.log.Warn("finalize namespace", "namespace", next, "err", err)
			}
		}
	}
}

// finalize takes one step towards the namespace's removal; errPending when pods are still going.
func (s *Service) finalize(ctx context.Context, ns string) error {
	n, _, err := s.get(ctx, ns)
	if errors.Is(err, bus.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if n.DeletionTimestamp == nil {
		return nil
	}
	if slices.Contains(n.Spec.Finalizers, corev1.FinalizerKubernetes) {
		if err := s.deletePods(ctx, ns); err != nil {
			return err
		}
		for _, kv := range s.others {
			if err := deleteAll(ctx, kv, ns); err != nil {
				return err
			}
		}
		if err := s.purgeEvents(ctx, ns); err != nil {
			return err
		}
	}
	return s.removeFinalizer(ctx, ns)
}

// deletePods asks the store to delete every pod of ns that is not terminating yet; errPending while any
// pod is left.
func (s *Service) deletePods(ctx context.Context, ns string) error {
	keys, err := listKeys(ctx, s.pods, ns)
	if err != nil || len(keys) == 0 {
		return err
	}
	for _, key := range keys {
		p := &pb.Pod{}
		if _, err := bus.Get(ctx, s.pods, key, p); errors.Is(err, bus.ErrNotFound) {
			continue
		} else if err != nil {
			return err
		}
		md := p.GetMetadata()
		if md.GetDeletionTimestamp() != nil {
			continue
		}
		cmd := &pb.PodCommand{
			Op:   pb.PodCommand_OP_DELETE,
			Pod:  &pb.Pod{Metadata: &pb.ObjectMeta{Name: md.GetName(), Namespace: md.GetNamespace(), Uid: md.GetUid()}},
			User: User, PreconditionUid: md.GetUid(),
		}
		// One command per pod however many replicas send it: the stream de-duplicates by message id.
		err := s.pub.Publish(ctx, bus.SubjPodDelete, cmd, bus.Meta{
			MsgID: "nsdelete-" + md.GetUid(), Correlation: p.GetInternal().GetCorrelationId(), PodUID: md.GetUid(),
			Key: md.GetNamespace() + "/" + md.GetName(), User: User,
		})
		if err != nil {
			return fmt.Errorf("delete pod %s/%s: %w", ns, md.GetName(), err)
		}
		metrics.Count("namespaces.pods.deleted", 1)
	}
	return errPending
}

// deleteAll deletes every object of ns in kv, each at the revision read.
func deleteAll(ctx context.Context, kv jetstream.KeyValue, ns string) error {
	keys, err := listKeys(ctx, kv, ns)
	if err != nil {
		return err
	}
	for _, key := range keys {
		_, rev, err := bus.GetEncoded(ctx, kv, key)
		if errors.Is(err, bus.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		// A conflict (changed meanwhile) fails this pass; the next one deletes the newer object.
		if err := bus.Delete(ctx, kv, key, rev); err != nil {
			return err
		}
	}
	return nil
}

// purgeEvents removes the namespace's events, stored alone or in the namespace's batches.
func (s *Service) purgeEvents(ctx context.Context, ns string) error {
	st, err := s.conn.JS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return fmt.Errorf("events stream: %w", err)
	}
	for _, subj := range bus.ReadFilters(bus.SubjEventsFor(ns)) {
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("purge events %s: %w", subj, err)
		}
	}
	return nil
}

// removeFinalizer drops the kubernetes finalizer; with no finalizer left, the namespace record goes.
func (s *Service) removeFinalizer(ctx context.Context, ns string) error {
	n, rev, err := s.get(ctx, ns)
	if errors.Is(err, bus.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	had := len(n.Spec.Finalizers)
	n.Spec.Finalizers = slices.DeleteFunc(n.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
	left := len(n.Spec.Finalizers) > 0 || len(n.Finalizers) > 0
	if len(n.Spec.Finalizers) == had && left {
		// Removed already; another finalizer holds the namespace. Writing it again would wake every
		// replica's watch, which would finalize it again, and so on.
		return nil
	}
	key := bus.NodeKey(ns)
	if !left {
		err = bus.Delete(ctx, s.namespaces, key, rev)
	} else {
		var data []byte
		if data, err = encodeNamespace(n); err == nil {
			_, err = bus.UpdateEncoded(ctx, s.namespaces, key, data, rev)
		}
	}
	if err != nil {
		return fmt.Errorf("finalize namespace %s: %w", ns, err)
	}
	s.log.Info("namespace finalized", "namespace", ns)
	return nil
}

func (s *Service) get(ctx context.Context, ns string) (*corev1.Namespace, uint64, error) {
	data, rev, err := bus.GetEncoded(ctx, s.namespaces, bus.NodeKey(ns))
	if err != nil {
		return nil, 0, fmt.Errorf("namespace %s: %w", ns, err)
	}
	n, err := decodeNamespace(data)
	if err != nil {
		return nil, 0, err
	}
	return n, rev, nil
}

// listKeys lists the keys of ns's objects in kv (bus.ObjectKey).
func listKeys(ctx context.Context, kv jetstream.KeyValue, ns string) ([]string, error) {
	kl, err := kv.ListKeysFiltered(ctx, bus.PodKeyPrefix(ns))
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = kl.Stop() }()
	var out []string
	for k := range kl.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// The namespaces bucket holds each Namespace's JSON without its type and resourceVersion (see the
// admission service's jsonStorage).
func decodeNamespace(data []byte) (*corev1.Namespace, error) {
	n := &corev1.Namespace{}
	if err := json.Unmarshal(data, n); err != nil {
		return nil, fmt.Errorf("decode namespace: %w", errors.Join(bus.ErrMalformed, err))
	}
	return n, nil
}

func encodeNamespace(n *corev1.Namespace) ([]byte, error) {
	c := n.DeepCopy()
	c.ResourceVersion = ""
	c.SetGroupVersionKind(schema.GroupVersionKind{})
	return json.Marshal(c)
}
