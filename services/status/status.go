// Package status applies what node agents report: pod status reports (CAS on the pod, in seq order,
// deleting pods reported gone), node heartbeats (upsert of the node) and, as the node lifecycle
// controller does, marks nodes whose heartbeats stopped as Ready=Unknown.
//
//	status.pod.<node>     ─▶ pods/<ns.name>: status replaced when seq > internal.report_seq
//	                         refused (parked) unless the pod is bound to <node> and seq is not ahead
//	                         of the bus's clock by more than MaxClockSkew
//	                         gone: CAS delete ─▶ pod.deleted
//	                         event notes ─▶ event.<ns>.<name>
//	node.heartbeat.<node> ─▶ leases/<node>: renewed (created if absent)
//	                         nodes/<node>: created, or status replaced (spec and user labels kept) when
//	                         it changed or was written NodeStatusReportFrequency ago;
//	                         refused (parked) for another node or dated beyond MaxClockSkew
//	node monitor (watch)  ─▶ Ready=True but neither lease nor node heard of for NodeMonitorGracePeriod
//	                         ─▶ Ready=Unknown + NodeNotReady
package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
)

// Config configures one status replica.
type Config struct {
	ID      string // replica identity
	Workers int    // concurrent handlers per consumer, default 128
	// SharedWatches, when set, shares whole-bucket watches with the process's other services.
	SharedWatches *bus.WatchHub
	// NodeMonitorGracePeriod without heartbeat before a Ready node becomes Unknown (default 40s).
	NodeMonitorGracePeriod time.Duration
	// MonitorInterval between node monitor passes (default 5s).
	MonitorInterval time.Duration
	// NodeStatusReportFrequency is how old the node's stored heartbeat time may grow while its status is
	// unchanged before a heartbeat writes the node anyway (default 5m, as the kubelet's): in between,
	// heartbeats renew the node's lease alone.
	NodeStatusReportFrequency time.Duration
	// MaxClockSkew is how far ahead of the bus's clock (the time the stream stored the message) an
	// agent's report seq or heartbeat time may be before it is refused (default 1m).
	MaxClockSkew time.Duration
	Logger       *slog.Logger
}

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("invalid status config")

// ErrRefused marks a report or heartbeat its sender may not send: for a pod not bound to the node it
// names, on another node's subject, or dated beyond the clock skew. It is parked (bus.ErrPermanent).
var ErrRefused = errors.New("refused")

// refuse counts a refusal by why and returns the error that parks the message.
func refuse(why, format string, args ...any) error {
	metrics.Count("status.refused."+why, 1)
	return fmt.Errorf("%w: %w: %s", bus.ErrPermanent, ErrRefused, fmt.Sprintf(format, args...))
}

// casAttempts bounds the read-modify-write loops against concurrent writers.
const casAttempts = 16

// Service is one status replica.
type Service struct {
	cfg  Config
	conn *bus.Conn
	pub  *bus.Publisher
	// events groups the events recorded at once (a namespace's in one stored message).
	events *bus.Batcher
	log    *slog.Logger

	pods, nodes, leases jetstream.KeyValue
	last                podCache
	view                *nodeView
}

// New returns a status replica.
func New(cfg Config, conn *bus.Conn) (*Service, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("%w: ID is required", ErrConfig)
	}
	if conn == nil {
		return nil, fmt.Errorf("%w: connection is required", ErrConfig)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 128
	}
	if cfg.NodeMonitorGracePeriod <= 0 {
		cfg.NodeMonitorGracePeriod = 40 * time.Second
	}
	if cfg.MonitorInterval <= 0 {
		cfg.MonitorInterval = 5 * time.Second
	}
	if cfg.NodeStatusReportFrequency <= 0 {
		cfg.NodeStatusReportFrequency = 5 * time.Minute
	}
	if cfg.MaxClockSkew <= 0 {
		cfg.MaxClockSkew = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	actor := "status/" + cfg.ID
	return &Service{
		cfg:    cfg,
		conn:   conn,
		pub:    bus.NewPublisher(conn.JS, actor),
		events: bus.NewBatcher(conn.JS, actor),
		log:    cfg.Logger.With("actor", actor),
		view:   newNodeView(),
	}, nil
}

// Run handles reports and heartbeats and monitors nodes until ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	b, err := bus.OpenBuckets(ctx, s.conn.JS)
	if err != nil {
		return err
	}
	b = s.cfg.SharedWatches.WrapBuckets(b)
	s.pods, s.nodes = b.Pods, b.Nodes
	if s.leases, err = bus.OpenBucket(ctx, s.conn.JS, bus.BucketLeases); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return bus.Consume(gctx, s.conn.JS, bus.ConsumerSpec{
			Stream:  bus.StreamStatus,
			Durable: bus.ConsumerStatus,
			Filters: []string{bus.SubjAllPodStatus},
			Workers: s.cfg.Workers,
			Key:     func(m *bus.Msg) string { return m.Meta.PodUID },
			Logger:  s.log,
		}, s.handleReport)
	})
	g.Go(func() error {
		return bus.Consume(gctx, s.conn.JS, bus.ConsumerSpec{
			Stream:  bus.StreamHeartbeats,
			Durable: bus.ConsumerHeartbeats,
			Filters: []string{bus.SubjAllHeartbeats},
			Workers: s.cfg.Workers,
			Key:     func(m *bus.Msg) string { return m.Subject },
			Logger:  s.log,
		}, s.handleHeartbeat)
	})
	g.Go(func() error { return s.monitor(gctx) })
	return g.Wait()
}
