package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A Host runs the agents of several nodes in one process (simulated nodes, kwok-style) over one durable
// consumer and one read of the pods bucket, so that the JetStream consumers (each one a state file, and
// a Raft group on a replicated stream) grow with processes, not with nodes. A message is handed to its
// node's agent by the node in its subject.
//
// A host of a few nodes filters their subjects exactly. A larger one filters every node's
// (pod.bound.*, pod.terminate.*): the server checks a consumer's filters against each other pairwise,
// so thousands of them would make every consumer update slow. Messages for nodes hosted elsewhere are
// then acknowledged untouched: each process has its own consumer, so that takes nothing from the
// node's own.
//
// Delivery stays at least once: the consumer is durable and a message is acknowledged only after its
// effect is reported. A new shared consumer starts at the end of the stream (a new process name must
// not replay the bindings of every node ever), so before it handles anything the host reads the
// store once and starts the pods bound to its nodes that were never reported; a binding delivered as
// well finds its pod already there.
type Host struct {
	cfg    HostConfig
	conn   *bus.Conn
	agents []*Agent
	byNode map[string]*Agent // by bus.Token of the node name
	log    *slog.Logger
}

// HostConfig configures a Host.
type HostConfig struct {
	// Name names the durable consumer of a host of several nodes (bus.ConsumerAgentHost); it must stay
	// the same across restarts, so that messages left unacknowledged are redelivered. A host of one node
	// uses the node's own consumer (bus.ConsumerAgent) and needs no name.
	Name string
	// Workers handling messages concurrently (default 32 per node, at most 1024).
	Workers int
	Logger  *slog.Logger
}

// MaxExactFilterNodes is the largest host whose consumer filters its nodes' subjects one by one.
const MaxExactFilterNodes = 64

// ErrHostConfig is returned by NewHost for an unusable set of agents.
var ErrHostConfig = errors.New("invalid agent host")

// NewHost returns a host of the agents, which must be of distinct nodes.
func NewHost(cfg HostConfig, conn *bus.Conn, agents ...*Agent) (*Host, error) {
	if len(agents) == 0 || conn == nil {
		return nil, fmt.Errorf("%w: agents and a connection are required", ErrHostConfig)
	}
	if len(agents) > 1 && cfg.Name == "" {
		return nil, fmt.Errorf("%w: a host of several nodes needs a name", ErrHostConfig)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = min(32*len(agents), 1024)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Host{cfg: cfg, conn: conn, agents: agents, byNode: make(map[string]*Agent, len(agents)), log: cfg.Logger}
	for _, a := range agents {
		tok := bus.Token(a.cfg.Node)
		if _, dup := h.byNode[tok]; dup {
			return nil, fmt.Errorf("%w: node %s twice", ErrHostConfig, a.cfg.Node)
		}
		h.byNode[tok] = a
	}
	return h, nil
}

// ConsumerSpec is the durable consumer the host's agents share.
func (h *Host) ConsumerSpec() bus.ConsumerSpec {
	spec := bus.ConsumerSpec{
		Stream:  bus.StreamPods,
		Workers: h.cfg.Workers,
		Key:     func(m *bus.Msg) string { return m.Meta.PodUID },
		Logger:  h.log,
	}
	switch {
	case len(h.agents) == 1:
		node := h.agents[0].cfg.Node
		spec.Durable = bus.ConsumerAgent(node)
		spec.Filters = []string{bus.SubjPodBound(node), bus.SubjPodTerminate(node)}
		if bus.AgentFilterOK(node) {
			// One filter: the agent's credential may create this consumer with no other (natsauth).
			spec.Filters = []string{bus.SubjAgent(node)}
		}
	case len(h.agents) <= MaxExactFilterNodes:
		spec.Durable = bus.ConsumerAgentHost(h.cfg.Name)
		for _, a := range h.agents {
			spec.Filters = append(spec.Filters, bus.SubjPodBound(a.cfg.Node), bus.SubjPodTerminate(a.cfg.Node))
		}
	default:
		spec.Durable = bus.ConsumerAgentHost(h.cfg.Name)
		spec.Filters = []string{bus.SubjPodBoundAll, bus.SubjPodTermAll}
	}
	// A new shared consumer starts at the end of the stream rather than replaying every node's
	// history: what its nodes were sent before is in the store, where Run finds and starts it.
	spec.DeliverNew = len(h.agents) > 1
	return spec
}

// Run reconciles every agent with its runtime, then heartbeats and handles the nodes' pods until ctx is
// cancelled. Containers keep running when it returns; the next Run re-adopts them.
func (h *Host) Run(ctx context.Context) error {
	buckets, err := bus.OpenBuckets(ctx, h.conn.JS)
	if err != nil {
		return err
	}
	for _, a := range h.agents {
		if err := a.prepare(ctx); err != nil {
			return err
		}
		a.podStore = buckets.Pods
	}
	defer func() {
		for _, a := range h.agents {
			a.wg.Wait()
		}
	}()

	// The consumer first: the store is read after its start is fixed, so that every binding is either
	// delivered or already in the store.
	spec := h.ConsumerSpec()
	cons, err := bus.EnsureConsumer(ctx, h.conn.JS, spec)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	bound, err := h.boundPods(ctx, buckets.Pods)
	if err != nil {
		return err
	}
	shared := len(h.agents) > 1
	// Not errgroup.WithContext: reconcile adopts pods whose goroutines live on under ctx.
	var rg errgroup.Group
	rg.SetLimit(16)
	for _, a := range h.agents {
		rg.Go(func() error {
			if err := a.reconcile(ctx, bound[a.cfg.Node], shared); err != nil {
				return fmt.Errorf("reconcile node %s: %w", a.cfg.Node, err)
			}
			return nil
		})
	}
	if err := rg.Wait(); err != nil {
		return err
	}

	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, a := range h.agents {
		sub, err := a.subscribeLogs(ctx)
		if err != nil {
			return err
		}
		subs = append(subs, sub)
		if sub, err = a.subscribeStreams(ctx); err != nil {
			return err
		}
		subs = append(subs, sub)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, a := range h.agents {
		g.Go(func() error { a.heartbeats(gctx); return nil })
		g.Go(func() error { a.cleanupLoop(gctx); return nil })
		if sp, ok := a.rt.(StatsProvider); ok {
			g.Go(func() error { a.measureLoop(gctx, sp); return nil })
		}
	}
	g.Go(func() error { h.estimateLoop(gctx); return nil })
	g.Go(func() error { return bus.Work(gctx, h.conn.JS, cons, spec, h.handle) })
	return g.Wait()
}

func (h *Host) handle(ctx context.Context, m *bus.Msg) error {
	tok, terminate, ok := bus.SplitAgentSubject(m.Subject)
	if !ok {
		return fmt.Errorf("%w: unexpected subject %s", bus.ErrMalformed, m.Subject)
	}
	a := h.byNode[tok]
	if a == nil {
		return nil // a node of another process (see Host)
	}
	stop := keepAlive(ctx, m)
	defer stop()
	if terminate {
		return a.handleTerminate(ctx, m)
	}
	return a.handleBound(ctx, m)
}

// boundPods reads the pods the store has on the host's nodes, by node name then uid: one watch over the
// bucket's current values for all of them. A key may come more than once (a write made while the watch
// reads); its last entry stands.
func (h *Host) boundPods(ctx context.Context, kv jetstream.KeyValue) (map[string]map[string]*pb.Pod, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch pods: %w", err)
	}
	defer func() { _ = w.Stop() }()
	byKey := map[string]*pb.Pod{} // the host's pods
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("watch pods: %w", bus.ErrWatchEnded) // a partial list is no list
			}
			if e == nil {
				out := map[string]map[string]*pb.Pod{}
				for _, p := range byKey {
					node := p.GetSpec().GetNodeName()
					if out[node] == nil {
						out[node] = map[string]*pb.Pod{}
					}
					out[node][p.GetMetadata().GetUid()] = p
				}
				return out, nil
			}
			delete(byKey, e.Key())
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			p := &pb.Pod{}
			if err := proto.Unmarshal(e.Value(), p); err != nil {
				h.log.Warn("undecodable pod in store", "key", e.Key(), "err", err)
				continue
			}
			if node := p.GetSpec().GetNodeName(); node != "" && h.byNode[bus.Token(node)] != nil {
				byKey[e.Key()] = p
			}
		}
	}
}
