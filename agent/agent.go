// Package agent is podbus's kubelet: it runs the pods bound to one node through a container Runtime,
// reports their status and the node's heartbeats, and stops pods when told to.
//
// A pod's life on the node (one podWorker per pod uid):
//
//	pod.bound.<node> ─▶ admit ──over capacity──▶ Failed (OutOfcpu, ...)
//	                      │
//	                      ▼
//	               ContainerCreating ─▶ sandbox (IP) ─▶ init containers ─▶ containers ─▶ Running
//	                                                                                     │ exits
//	              restartPolicy says restart: back-off (CrashLoopBackOff) and start again ◀┤
//	              every container done and no restart: Succeeded / Failed, sandbox removed ◀┘
//
//	pod.terminate.<node> ─▶ stop containers within the grace period ─▶ remove sandbox ─▶ report gone
//
// Every change is a pb.PodStatusReport on status.pod.<node> with a strictly increasing seq, so the
// status service can drop reports that arrive late. Messages are acked only after the report that
// follows from them is stored by JetStream.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/reportseq"
	"github.com/podbus/podbus/internal/secretbox"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Config configures one node's agent.
type Config struct {
	Node    string            // node name (required)
	PodCIDR string            // e.g. 10.42.1.0/24, shown in the node spec
	CPU     string            // capacity, default "4"
	Memory  string            // capacity, default "8Gi"
	Storage string            // ephemeral-storage capacity, default "100Gi"
	MaxPods int               // default 110
	Labels  map[string]string // extra node labels (--node-labels); the well-known ones are always set
	HostIP  string            // default 127.0.0.1
	Workers int               // pods handled concurrently by the consumer, default 32
	Logger  *slog.Logger
	Prober  Prober // nil: the runtime's if it implements Prober, else the network prober

	HeartbeatInterval time.Duration // default 10s
	// StatusCoalesce is how long a starting pod may take before ContainerCreating is reported on its own
	// (default 25ms; a pod that is up sooner is reported Running at once).
	StatusCoalesce time.Duration
	// BackoffBase and BackoffMax shape the restart back-off of crashing containers (kubelet: 10s, 5m).
	BackoffBase time.Duration
	BackoffMax  time.Duration

	// Taints the node registers with (--register-with-taints): applied when the node is first created
	// only, like the kubelet's; users own the taints afterwards.
	Taints []*pb.Taint
	// Extended resources in the capacity, e.g. {"example.com/gpu": "2"}.
	Extended map[string]string
	// NetworkCheckInterval is how often each pod's network is verified (CNI CHECK) once it runs, jittered
	// by ±10 % (default 30s, or negative on a runtime whose networks cannot break on their own; negative:
	// only the check before the pod is first Ready). A failed check is retried sooner: from a tenth of
	// the interval, doubling.
	NetworkCheckInterval time.Duration
	// SecretBox opens the Secrets volumes mount (the API's encryption key); nil: only Secrets stored in
	// clear open.
	SecretBox *secretbox.Box
	// VolumeSyncPeriod is how often volumes are refreshed (ConfigMap changes) and emptyDir limits
	// checked (default DefaultVolumeSyncPeriod).
	VolumeSyncPeriod time.Duration
	// UsageInterval is how often usage is measured and published (default DefaultUsageInterval).
	UsageInterval time.Duration
	// EvictionHard holds the hard eviction thresholds (the kubelet's --eviction-hard syntax); ""
	// is DefaultEvictionHard, EvictionNone is none. Only a runtime that measures (StatsProvider) applies them.
	EvictionHard string
	// AllowPrivileged lets pods run privileged containers (--allow-privileged); without it they are
	// rejected with ReasonPrivilegedDisallowed.
	AllowPrivileged bool
	// CleanupInterval is how often the agent looks for pods it runs, and sandboxes the runtime holds,
	// whose pod left the store without a termination reaching the agent (default
	// DefaultCleanupInterval; negative: never, the default on a simulated runtime, whose thousands of
	// nodes a process runs would each read every pod of theirs).
	CleanupInterval time.Duration
	// Clock is the agent's wall clock (nil: time.Now); tests and the chaos harness step it. Report
	// sequences read it once per start only (see internal/reportseq); heartbeats are dated by it.
	Clock func() time.Time
}

// Kubelet identity reported in node info.
const KubeletVersion = "v1.32.0-podbus"

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("invalid agent config")

// Agent is one node's kubelet.
type Agent struct {
	cfg    Config
	conn   *bus.Conn
	rt     Runtime
	prober Prober
	pub    *bus.Publisher
	log    *slog.Logger
	alloc  *resources // allocatable, for kubelet admission

	// reports groups the status reports sent while the node's previous group awaits its ack into one
	// stored message: under load a node reports many pods at once.
	reports *bus.Batcher

	seq atomic.Uint64 // last report seq

	// Set by Run before anything else starts.
	runtimeVersion string // "containerd://1.7.24"
	runtimeName    string // "containerd"
	startedAt      time.Time

	thresholds []Threshold
	hostIPSet  bool // Config.HostIP was given: the runtime's host information does not replace it

	mu       sync.Mutex
	pods     map[string]*podWorker // by uid
	gone     map[string]time.Time  // uids terminated lately, so a late redelivered binding does not revive them
	host     *HostInfo             // the real machine's, nil for a simulated node
	pressure map[string]bool       // node conditions under pressure (MemoryPressure, ...) at the last sample
	runCtx   context.Context
	wg       sync.WaitGroup // pod goroutines

	// used is admitLocked's sum of the active pods' requests (nil: not summed yet); usedStale says it
	// is to be summed again. An admission adds to it; anything that may stop a pod counting sets
	// usedStale, which needs no lock so that a worker can set it holding its own.
	used      *resources
	usedStale atomic.Bool

	usageBuf usageBuffers // estimate's

	objsOnce sync.Once
	objs     ObjectGetter // see objects

	// podStore is the pods bucket, set by Host.Run: a binding from before this run is checked against
	// it before its pod starts (see handleBound).
	podStore jetstream.KeyValue
}

// staticNetwork is a runtime whose pod networks change only when told to (the simulated one): a
// periodic check of them finds nothing.
type staticNetwork interface{ StaticNetwork() bool }

// New returns the agent of cfg.Node using runtime rt.
func New(cfg Config, conn *bus.Conn, rt Runtime) (*Agent, error) {
	if cfg.Node == "" {
		return nil, fmt.Errorf("%w: node name is required", ErrConfig)
	}
	if rt == nil || conn == nil {
		return nil, fmt.Errorf("%w: runtime and connection are required", ErrConfig)
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&cfg.CPU, "4")
	def(&cfg.Memory, "8Gi")
	def(&cfg.Storage, "100Gi")
	hostIPSet := cfg.HostIP != ""
	def(&cfg.HostIP, "127.0.0.1")
	if cfg.UsageInterval <= 0 {
		cfg.UsageInterval = DefaultUsageInterval
	}
	switch cfg.EvictionHard {
	case "":
		cfg.EvictionHard = DefaultEvictionHard
	case EvictionNone:
		cfg.EvictionHard = ""
	}
	thresholds, err := ParseThresholds(cfg.EvictionHard)
	if err != nil {
		return nil, fmt.Errorf("%w: --eviction-hard: %w", ErrConfig, err)
	}
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = 110
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.StatusCoalesce <= 0 {
		cfg.StatusCoalesce = 25 * time.Millisecond
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 10 * time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Minute
	}
	if cfg.NetworkCheckInterval == 0 {
		cfg.NetworkCheckInterval = 30 * time.Second
		if s, ok := rt.(staticNetwork); ok && s.StaticNetwork() {
			// Nothing to find, and every pod would keep a goroutine and a timer for it: a simulated
			// host runs thousands of nodes' pods in one process.
			cfg.NetworkCheckInterval = -1
		}
	}
	if cfg.CleanupInterval == 0 {
		cfg.CleanupInterval = DefaultCleanupInterval
		if s, ok := rt.(staticNetwork); ok && s.StaticNetwork() {
			cfg.CleanupInterval = -1
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	alloc, err := parseCapacity(cfg)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:   cfg,
		conn:  conn,
		rt:    rt,
		pub:   bus.NewPublisher(conn.JS, "agent/"+cfg.Node),
		log:   cfg.Logger.With("node", cfg.Node),
		alloc: alloc,
		pods:  map[string]*podWorker{},
		gone:  map[string]time.Time{},

		reports: bus.NewBatcher(conn.JS, "agent/"+cfg.Node),

		thresholds: thresholds,
		hostIPSet:  hostIPSet,
	}
	switch p, ok := rt.(Prober); {
	case cfg.Prober != nil:
		a.prober = cfg.Prober
	case ok:
		a.prober = p
	default:
		a.prober = &NetProber{Exec: rt}
	}
	return a, nil
}

// Run reconciles with the runtime, then heartbeats and handles the node's pods until ctx is cancelled.
// Containers keep running when it returns, like a kubelet restart; the next Run re-adopts them.
// It is a Host of this one agent, with the node's own durable consumer.
func (a *Agent) Run(ctx context.Context) error {
	h, err := NewHost(HostConfig{Workers: a.cfg.Workers, Logger: a.cfg.Logger}, a.conn, a)
	if err != nil {
		return err
	}
	return h.Run(ctx)
}

// prepare readies the agent to run under ctx: the runtime's version, the start time.
func (a *Agent) prepare(ctx context.Context) error {
	version, err := a.rt.Version(ctx)
	if err != nil {
		return fmt.Errorf("node %s: runtime version: %w", a.cfg.Node, err)
	}
	a.mu.Lock()
	a.runCtx = ctx
	a.runtimeVersion = version
	a.runtimeName, _, _ = strings.Cut(version, "://")
	a.startedAt = time.Now()
	a.mu.Unlock()
	return a.learnHost(ctx)
}

func (a *Agent) handleBound(ctx context.Context, m *bus.Msg) error {
	var b pb.PodBinding
	if err := m.Decode(&b); err != nil {
		return err
	}
	md := b.GetPod().GetMetadata()
	if md.GetUid() == "" || md.GetName() == "" {
		return fmt.Errorf("%w: binding without pod uid or name", bus.ErrMalformed)
	}
	// The gone set that keeps a late binding from reviving a terminated pod lives in this process. A
	// binding delivered again, or sent before this run began, may be older than a termination an
	// earlier run handled: its pod starts only if the store still holds it, alive.
	if a.podStore != nil && (m.Delivered > 1 || m.Time.Before(a.startedAt)) && !a.runs(md.GetUid()) {
		left, err := a.leftStore(ctx, md)
		if err != nil {
			return err
		}
		if left {
			a.log.Info("binding of a pod that left the store: not started", "pod", md.GetNamespace()+"/"+md.GetName(), "uid", md.GetUid())
			return a.reportGone(ctx, &pb.PodTermination{Uid: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(), Node: a.cfg.Node})
		}
	}
	return a.bind(ctx, b.GetPod(), m.Time)
}

// runs says whether the pod of uid is this run's already.
func (a *Agent) runs(uid string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.pods[uid]
	return ok
}

// leftStore says whether the pod of md is gone from the store, replaced by another of its name, or
// being deleted there.
func (a *Agent) leftStore(ctx context.Context, md *pb.ObjectMeta) (bool, error) {
	p, err := a.storedPod(ctx, md.GetNamespace(), md.GetName())
	if err != nil {
		return false, err
	}
	return left(p, md.GetUid()), nil
}

// left says whether stored, the pod the store holds under a pod's name (nil: none), means that the
// pod of uid left the store: deleted, replaced by another of its name, or being deleted.
func left(stored *pb.Pod, uid string) bool {
	return stored == nil || stored.GetMetadata().GetUid() != uid || stored.GetMetadata().GetDeletionTimestamp() != nil
}

func (a *Agent) handleTerminate(ctx context.Context, m *bus.Msg) error {
	var t pb.PodTermination
	if err := m.Decode(&t); err != nil {
		return err
	}
	if t.GetUid() == "" {
		return fmt.Errorf("%w: termination without pod uid", bus.ErrMalformed)
	}
	return a.terminate(ctx, &t)
}

// keepAlive extends the ack wait while a handler works on a slow pod (image pulls, grace periods).
func keepAlive(ctx context.Context, m *bus.Msg) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				m.InProgress()
			}
		}
	}()
	return func() { close(done) }
}

// bind handles a binding: admission, then the pod's worker starts it. It returns once the report that
// follows ContainerCreating (Running, an init state or a failure) is stored. boundAt is when the
// binding was stored (the node_start stage runs from there to the start settling). The pod becomes
// its worker's: the caller must not use it after.
func (a *Agent) bind(ctx context.Context, pod *pb.Pod, boundAt time.Time) error {
	md := pod.GetMetadata()
	uid, ns, name := md.GetUid(), md.GetNamespace(), md.GetName()
	a.mu.Lock()
	if _, ok := a.gone[uid]; ok {
		a.mu.Unlock()
		return a.reportGone(ctx, &pb.PodTermination{Uid: uid, Namespace: ns, Name: name, Node: a.cfg.Node})
	}
	if w, ok := a.pods[uid]; ok {
		a.mu.Unlock()
		// Redelivery: the pod is ours already. Wait for its start to settle and report again.
		select {
		case <-w.started:
		case <-ctx.Done():
			return ctx.Err()
		}
		return w.report(ctx, false)
	}
	w, runCtx, err := a.admitAndRun(ctx, pod)
	if w == nil || err != nil {
		return err
	}
	// Like the kubelet's status manager, only the latest status is worth sending: a pod whose worker
	// reports (Running, or why it cannot start) within the coalescing window goes straight to that
	// report, one write instead of two. A slower start reports ContainerCreating first.
	coalesce := time.NewTimer(a.cfg.StatusCoalesce)
	defer coalesce.Stop()
	select {
	case <-w.started:
	case <-w.reporting:
	case <-coalesce.C:
		if err := w.report(ctx, false); err != nil { // ContainerCreating
			return err // the binding is redelivered; the pod, already ours, is reported again then
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-w.started:
		if err := runCtx.Err(); err != nil {
			// Shutting down before the pod settled: leave the binding for redelivery.
			return fmt.Errorf("start pod %s/%s: %w", ns, name, err)
		}
		metrics.StageNodeStart.Since(boundAt)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// admitAndRun admits a new pod and starts its worker, or reports it rejected. The pod becomes the
// worker's. Called with a.mu held; it releases it. It returns the running worker and the context it
// runs in, or no worker when the pod was rejected.
func (a *Agent) admitAndRun(ctx context.Context, pod *pb.Pod) (*podWorker, context.Context, error) {
	uid := pod.GetMetadata().GetUid()
	w := newPodWorker(a, pod)
	if reason, msg := a.admitLocked(w); reason != "" {
		w.reject(reason, msg)
		a.pods[uid] = w
		a.mu.Unlock()
		if err := w.report(ctx, false); err != nil {
			a.forget(w)
			return nil, nil, err
		}
		return nil, nil, nil
	}
	a.pods[uid] = w
	runCtx := a.runCtx
	a.mu.Unlock()

	a.wg.Add(1)
	go w.run(runCtx, nil, a.wg.Done)
	return w, runCtx, nil
}

// start starts a pod bound here whose binding this agent may never receive, as the binding would, but
// without waiting for it: its worker reports it.
func (a *Agent) start(ctx context.Context, pod *pb.Pod) error {
	a.mu.Lock()
	if _, ok := a.pods[pod.GetMetadata().GetUid()]; ok {
		a.mu.Unlock()
		return nil
	}
	_, _, err := a.admitAndRun(ctx, proto.Clone(pod).(*pb.Pod)) // pod is the reconcile's, not ours
	return err
}

func (a *Agent) forget(w *podWorker) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pods[w.uid] == w {
		delete(a.pods, w.uid)
		a.recount()
	}
}

func (a *Agent) worker(uid string) *podWorker {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods[uid]
}

// terminate stops a pod and reports it gone. An unknown pod is reported gone at once.
func (a *Agent) terminate(ctx context.Context, t *pb.PodTermination) error {
	w := a.worker(t.GetUid())
	if w == nil {
		return a.reportGone(ctx, t)
	}
	grace := time.Duration(t.GetGracePeriodSeconds()) * time.Second
	if t.GetGracePeriodSeconds() < 0 {
		grace = podGrace(w.pod)
	}
	if err := w.terminate(ctx, grace); err != nil {
		return err
	}
	if err := w.report(ctx, true); err != nil {
		return err
	}
	a.forget(w)
	a.mu.Lock()
	a.remember(w.uid)
	a.mu.Unlock()
	return nil
}

// tombstoneTTL is how long a terminated pod's uid is remembered: longer than any redelivery.
const tombstoneTTL = time.Hour

// remember records a terminated uid, dropping expired ones now and then. Called with a.mu held.
func (a *Agent) remember(uid string) {
	now := time.Now()
	if len(a.gone) >= 1024 {
		for u, at := range a.gone {
			if now.Sub(at) > tombstoneTTL {
				delete(a.gone, u)
			}
		}
	}
	a.gone[uid] = now
}

// reportGone reports a pod this agent does not run as gone.
func (a *Agent) reportGone(ctx context.Context, t *pb.PodTermination) error {
	rep := &pb.PodStatusReport{
		Uid: t.GetUid(), Namespace: t.GetNamespace(), Name: t.GetName(), Node: a.cfg.Node,
		Seq: a.nextSeq(), Gone: true, Status: &pb.PodStatus{Phase: "Failed"},
	}
	return a.publishReport(ctx, rep, "")
}

// boot numbers this run's reports after every sequence the store applied for the node's pods, and
// after this process's earlier runs, whatever the clock says (see internal/reportseq).
func (a *Agent) boot(bound map[string]*pb.Pod) {
	stored := make([]uint64, 0, len(bound))
	for _, p := range bound {
		stored = append(stored, p.GetInternal().GetReportSeq())
	}
	for {
		last := a.seq.Load()
		if a.seq.CompareAndSwap(last, reportseq.Boot(a.cfg.Clock(), last, stored...)) {
			return
		}
	}
}

// nextSeq returns the next report sequence: strictly increasing, and independent of the clock once the
// run has booted.
func (a *Agent) nextSeq() uint64 {
	for {
		last := a.seq.Load()
		if last == 0 {
			a.boot(nil)
			continue
		}
		if next := reportseq.Next(last); a.seq.CompareAndSwap(last, next) {
			return next
		}
	}
}

func (a *Agent) publishReport(ctx context.Context, rep *pb.PodStatusReport, correlation string) error {
	meta := bus.Meta{
		MsgID:       fmt.Sprintf("st-%s-%d", rep.GetUid(), rep.GetSeq()),
		Correlation: correlation,
		PodUID:      rep.GetUid(),
		Key:         rep.GetNamespace() + "/" + rep.GetName(),
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.reports.Publish(pctx, bus.SubjPodStatus(a.cfg.Node), rep, meta); err != nil {
		return fmt.Errorf("report status of pod %s/%s: %w", rep.GetNamespace(), rep.GetName(), err)
	}
	return nil
}

// reconcile runs before any message is handled: sandboxes whose pod left the store (or moved) are
// removed, the others are re-adopted, and pods bound here that have no sandbox are started again.
// bound holds the pods the store has on this node (see Host.boundPods). startUnreported starts the pods
// bound here that were never reported, too: when their bindings may have been published before the
// consumer began (see Host), instead of leaving them to redelivery.
func (a *Agent) reconcile(ctx context.Context, bound map[string]*pb.Pod, startUnreported bool) error {
	a.boot(bound)
	sbs, err := a.rt.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	have := map[string]bool{}
	var leftovers []SandboxInfo
	for _, info := range sbs {
		have[info.PodUID] = true
		p := bound[info.PodUID]
		if p == nil || p.GetMetadata().GetDeletionTimestamp() != nil {
			leftovers = append(leftovers, info)
			continue
		}
		a.adopt(ctx, p, &info)
	}
	if err := a.removeLeftovers(ctx, leftovers, bound); err != nil {
		return err
	}
	var unreported []*pb.Pod
	for uid, p := range bound {
		if have[uid] || isTerminalPhase(p.GetStatus().GetPhase()) {
			continue
		}
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			md := p.GetMetadata()
			if err := a.reportGone(ctx, &pb.PodTermination{Uid: uid, Namespace: md.GetNamespace(), Name: md.GetName(), Node: a.cfg.Node}); err != nil {
				return err
			}
			continue
		}
		if p.GetInternal().GetReportSeq() == 0 {
			// Never reported: its binding is still unacknowledged and will be redelivered, or, when it
			// may not be, started below once every reported pod counts against the capacity.
			unreported = append(unreported, p)
			continue
		}
		a.adopt(ctx, p, nil)
	}
	if !startUnreported {
		return nil
	}
	for _, p := range unreported {
		if err := a.start(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (a *Agent) removeLeftover(ctx context.Context, info SandboxInfo) error {
	for _, c := range info.Containers {
		if c.State == StateRunning {
			if err := a.rt.StopContainer(ctx, c.ID, 0); err != nil && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("stop leftover container %s: %w", c.ID, err)
			}
		}
	}
	if err := a.rt.RemoveSandbox(ctx, info.Sandbox); err != nil {
		return fmt.Errorf("remove leftover sandbox %s: %w", info.ID, err)
	}
	return nil
}

// adopt takes a pod over after a restart: from the runtime's state when its sandbox exists, from scratch
// otherwise. The pod's goroutine reports it.
func (a *Agent) adopt(ctx context.Context, p *pb.Pod, info *SandboxInfo) {
	w := newPodWorker(a, p)
	a.mu.Lock()
	a.pods[w.uid] = w
	a.recount()
	a.mu.Unlock()
	a.wg.Add(1)
	go w.run(ctx, info, a.wg.Done)
}

func isTerminalPhase(ph string) bool { return ph == "Succeeded" || ph == "Failed" }
