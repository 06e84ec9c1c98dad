// Package controllers runs kube-controller-manager's DaemonSet, disruption (PodDisruptionBudget status)
// and garbage-collector controllers over the bus.
//
//	every kind's bucket ──watch──▶ one cache (pods, nodes, daemonsets, budgets, every object's owners)
//	         │                        │ a change marks what it concerns dirty; a resync marks everything
//	         ▼                        ▼
//	  daemonsets: one pod per eligible node ──▶ pod.cmd.create / pod.cmd.delete (the store's path) + event
//	  budgets:    status from the pods       ──▶ compare-and-set on the budget
//	  collector:  owners gone or deleting    ──▶ dependents deleted or orphaned, finalizers removed (CAS)
//
// Replicas need no leader: every bucket write is a compare-and-set at the revision watched, a pod a
// DaemonSet makes has a name derived from the DaemonSet and the node (the store refuses a second one),
// and deletions carry one message id per pod. A replica that loses a race sees the winner's write on
// its watch and examines the object again.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/events"
)

// Defaults.
const (
	DefaultResync = 10 * time.Second
	// Users the controllers' pod commands are attributed to, as kube-controller-manager's service accounts.
	UserDaemonSet = "system:serviceaccount:kube-system:daemon-set-controller"
	UserGC        = "system:serviceaccount:kube-system:generic-garbage-collector"
)

// Config configures one replica.
type Config struct {
	ID string
	// SharedWatches, when set, shares whole-bucket watches with the process's other services.
	SharedWatches *bus.WatchHub
	// Kinds are the stored kinds (admission.KindBuckets): the collector watches them all. Empty: pods,
	// nodes, daemonsets and poddisruptionbudgets.
	Kinds []bus.KindBucket
	// Resync re-examines everything this often, in case a write was lost.
	Resync time.Duration
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// now is the clock (tests).
	now func() time.Time
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("controllers: invalid config")

// defaultKinds are the kinds the controllers need besides the collector's.
var defaultKinds = []bus.KindBucket{
	{APIVersion: "v1", Kind: "Pod", Bucket: bus.BucketPods, Namespaced: true, Proto: true},
	{APIVersion: "v1", Kind: "Node", Bucket: bus.BucketNodes, Proto: true},
	{APIVersion: "apps/v1", Kind: "DaemonSet", Bucket: bus.BucketDaemonSets, Namespaced: true},
	{APIVersion: "policy/v1", Kind: "PodDisruptionBudget", Bucket: bus.BucketPDBs, Namespaced: true},
}

// Service is one replica. All state belongs to Run's goroutine.
type Service struct {
	cfg   Config
	conn  *bus.Conn
	pub   *bus.Publisher
	dsRec *events.Recorder
	log   *slog.Logger
	kv    map[string]jetstream.KeyValue // by bucket

	cache
	dirtyDS, dirtyPDB, dirtyGC map[string]bool // daemonset and budget keys, object uids

	session func(context.Context) error // one watch of every bucket: s.watch; tests replace it
}

// New checks the configuration; Run opens the buckets.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if err := bus.CheckReplica(ErrConfig, cfg.ID, conn); err != nil {
		return nil, err
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = defaultKinds
	}
	for _, want := range defaultKinds {
		if !hasBucket(cfg.Kinds, want.Bucket) {
			return nil, fmt.Errorf("%w: kinds lack bucket %s", ErrConfig, want.Bucket)
		}
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	actor := "controllers/" + cfg.ID
	pub := bus.NewPublisher(conn.JS, actor)
	s := &Service{
		cfg:   cfg,
		conn:  conn,
		pub:   pub,
		dsRec: events.NewRecorder(pub, "daemonset-controller", cfg.ID),
		log:   cfg.Logger.With("actor", actor),
		kv:    map[string]jetstream.KeyValue{},
	}
	s.reset()
	s.session = s.watch
	return s, nil
}

func hasBucket(kinds []bus.KindBucket, b string) bool {
	for _, k := range kinds {
		if k.Bucket == b {
			return true
		}
	}
	return false
}

// change is one watched entry of a kind's bucket; entry nil: the bucket's initial values are all in.
type change struct {
	kind  *bus.KindBucket
	entry jetstream.KeyValueEntry
}

// Run watches every bucket and drives the controllers until ctx ends. A bucket's watch that ends while
// running (see bus.ErrWatchEnded) is opened again with fresh state, as an informer relists.
func (s *Service) Run(ctx context.Context) error {
	return bus.Relist(ctx, s.log, s.session, s.reset)
}

// reset empties the caches and the dirty sets: the state a session starts from.
func (s *Service) reset() {
	s.cache = newCache()
	s.dirtyDS, s.dirtyPDB, s.dirtyGC = map[string]bool{}, map[string]bool{}, map[string]bool{}
}

// watch watches every bucket and drives the controllers until ctx ends or a watch does.
func (s *Service) watch(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := make(chan change, 1024)
	ended := make(chan error, len(s.cfg.Kinds))
	for i := range s.cfg.Kinds {
		kb := &s.cfg.Kinds[i]
		kv, err := bus.OpenBucket(ctx, s.conn.JS, kb.Bucket)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("controllers: %w", err)
		}
		kv = s.cfg.SharedWatches.Wrap(kv)
		s.kv[kb.Bucket] = kv
		w, err := kv.WatchAll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("controllers: watch %s: %w", kb.Bucket, err)
		}
		go forward(ctx, w, kb, changes, ended)
	}
	unsynced := len(s.cfg.Kinds)
	resync := time.NewTicker(s.cfg.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-ended:
			if ctx.Err() != nil {
				return nil // stopped while the watch was closing
			}
			return err
		case c := <-changes:
			if c.entry == nil {
				unsynced--
			} else {
				s.apply(c)
			}
			// Take what else is waiting before acting, so a burst is acted on once.
			for drained := false; !drained; {
				select {
				case c := <-changes:
					if c.entry == nil {
						unsynced--
					} else {
						s.apply(c)
					}
				default:
					drained = true
				}
			}
		case <-resync.C:
			s.markAll()
		}
		if unsynced == 0 {
			s.work(ctx)
		}
	}
}

// forward copies a watch's entries to out until ctx ends; the watch's end is reported on ended.
func forward(ctx context.Context, w jetstream.KeyWatcher, kb *bus.KindBucket, out chan<- change, ended chan<- error) {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return // stopped: the watch closes with the context
				}
				ended <- fmt.Errorf("controllers: %w: %s", bus.ErrWatchEnded, kb.Bucket)
				return
			}
			select {
			case out <- change{kind: kb, entry: e}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// work runs each controller over what is dirty.
func (s *Service) work(ctx context.Context) {
	for key := range s.dirtyDS {
		delete(s.dirtyDS, key)
		if err := s.syncDaemonSet(ctx, key); err != nil && ctx.Err() == nil {
			s.log.Warn("sync daemonset", "daemonset", key, "err", err)
		}
	}
	for key := range s.dirtyPDB {
		delete(s.dirtyPDB, key)
		if err := s.syncPDB(ctx, key); err != nil && ctx.Err() == nil {
			s.log.Warn("sync poddisruptionbudget", "pdb", key, "err", err)
		}
	}
	for uid := range s.dirtyGC {
		delete(s.dirtyGC, uid)
		if err := s.collect(ctx, uid); err != nil && ctx.Err() == nil {
			s.log.Warn("collect garbage", "uid", uid, "err", err)
		}
	}
}

// markAll marks every object dirty: the resync.
func (s *Service) markAll() {
	for key := range s.dsets {
		s.dirtyDS[key] = true
	}
	for key := range s.pdbs {
		s.dirtyPDB[key] = true
	}
	for uid, o := range s.objects {
		if len(o.owners) > 0 || o.deleting {
			s.dirtyGC[uid] = true
		}
	}
}
