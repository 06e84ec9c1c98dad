package loadtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/schedsim"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/binder"
	"github.com/podbus/podbus/services/scheduler"
	"github.com/podbus/podbus/services/store"
)

// Scenario names.
const (
	ScenarioPipeline        = "pipeline"
	ScenarioSchedulingBasic = "scheduling-basic"
)

// Variants of the scheduling-basic scenario (the measured pods' constraints).
const (
	VariantBasic        = "basic"
	VariantAntiAffinity = "anti-affinity" // required pod anti-affinity on the hostname within 10 groups
	VariantSpread       = "spread"        // topology spread over zones, maxSkew 1, DoNotSchedule
)

// Plugin names whose presence the variants depend on.
const (
	pluginInterPodAffinity   = "InterPodAffinity"
	pluginPodTopologySpread  = "PodTopologySpread"
	benchNamespace           = "bench"
	initNamespace            = "init"
	benchZones               = 10
	benchAntiAffinityGroups  = 10
	benchSubmitInflight      = 512
	benchNodeCPU, benchNodeM = "4", "32Gi"
	benchNodePods            = 110
	benchPodCPU, benchPodMem = "100m", "64Mi"
)

// basicRun is the outcome of one measured run.
type basicRun struct {
	label         string
	pods, bound   int
	unschedulable int
	seconds       float64
	rate          float64 // pods/s from the first creation to the last binding
	p50, p99      float64 // created→bound, ms
	cpuMsPerPod   float64 // the process's CPU time (server and services) per measured pod
	counters      map[string]int64
}

// runSchedulingBasic is kube-scheduler's scheduler_perf SchedulingBasic on podbus: nodes registered
// directly, InitPods already bound, Pods submitted as store commands (pod.cmd.create, the path admission
// takes, without HTTP) and measured from the store's creation to the binder's commit, both read from
// the pods bucket's own timestamps. Each replica count runs on a fresh embedded server; then the raw
// JetStream ceiling runs the same messages and KV writes with no scheduling work.
//
// An unmeasured run of the first replica count goes first, unless NoWarmup: the first run in a fresh
// process also grows the Go heap to its working size, touching every page of it for the first time,
// which a scheduler that has been running does not pay and the runs after it would not either.
func runSchedulingBasic(ctx context.Context, cfg Config, w io.Writer) error {
	replicas, err := parseReplicas(cfg.Replicas)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "scheduling-basic (%s): %d nodes, %d pods placed, %d pods measured; pods submitted as pod.cmd.create (no HTTP)\n",
		cfg.Variant, cfg.Nodes, cfg.InitPods, cfg.Pods)
	if !cfg.NoWarmup {
		fmt.Fprintf(w, "after one unmeasured run of %d scheduler(s) (--no-warmup: none)\n", replicas[0])
	}
	switch {
	case cfg.Variant == VariantAntiAffinity && !schedsim.HasPlugin(pluginInterPodAffinity):
		fmt.Fprintf(w, "note: no %s plugin registered; the anti-affinity terms are not enforced\n", pluginInterPodAffinity)
	case cfg.Variant == VariantSpread && !schedsim.HasPlugin(pluginPodTopologySpread):
		fmt.Fprintf(w, "note: no %s plugin registered; the spread constraints are not enforced\n", pluginPodTopologySpread)
	}
	if !cfg.NoWarmup {
		warm := cfg
		warm.CPUProfile, warm.Quiet = "", true
		if _, err := basicOnce(ctx, warm, replicas[0], false); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	var runs []basicRun
	for _, r := range replicas {
		res, err := basicOnce(ctx, cfg, r, false)
		if err != nil {
			return fmt.Errorf("%d scheduler(s): %w", r, err)
		}
		runs = append(runs, res)
	}
	ceil, err := basicOnce(ctx, cfg, 0, true)
	if err != nil {
		return fmt.Errorf("raw JetStream ceiling: %w", err)
	}
	runs = append(runs, ceil)

	fmt.Fprintf(w, "%-28s %7s %7s %8s %9s %9s %9s %9s %11s\n", "run", "pods", "bound", "unsched", "seconds", "pods/s", "p50 ms", "p99 ms", "cpu ms/pod")
	for _, r := range runs {
		fmt.Fprintf(w, "%-28s %7d %7d %8d %9.2f %9.0f %9.1f %9.1f %11.3f\n", r.label, r.pods, r.bound, r.unschedulable, r.seconds, r.rate, r.p50, r.p99, r.cpuMsPerPod)
	}
	for _, r := range runs[:len(runs)-1] {
		if ceil.rate > 0 {
			fmt.Fprintf(w, "%s: %.0f%% of the raw JetStream ceiling\n", r.label, 100*r.rate/ceil.rate)
		}
	}
	fmt.Fprintln(w, "ceiling per pod: KV create + 2 KV compare-and-sets (alloc, pod), 5 messages (cmd, pending, scheduled, bound, event; all but bound grouped as the services group them), 3 acks")
	if cfg.Verbose {
		for _, r := range runs[:len(runs)-1] {
			fmt.Fprintf(w, "%s counters:\n", r.label)
			printCounters(w, r.counters)
		}
	}
	return nil
}

func parseReplicas(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--replicas: %q is not a list of positive counts", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// basicOnce runs one measurement on a fresh embedded server: with schedulers replicas, or the ceiling.
func basicOnce(ctx context.Context, cfg Config, schedulers int, ceiling bool) (basicRun, error) {
	label := fmt.Sprintf("%d scheduler(s)", schedulers)
	if ceiling {
		label = "raw JetStream ceiling"
	}
	out := basicRun{label: label, pods: cfg.Pods}
	dir, err := dataDir(cfg.DataDir, "podbus-bench-")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(dir)
	srv, err := bus.RunServer(bus.ServerConfig{Port: -1, StoreDir: filepath.Join(dir, "nats"), Name: "bench"})
	if err != nil {
		return out, err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var conns []*bus.Conn
	defer func() {
		for _, c := range conns {
			c.NC.Close()
		}
	}()
	dial := func(name string) (*bus.Conn, error) {
		c, err := bus.Connect(ctx, srv.ClientURL(), name, bus.InProcess(srv))
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	root, err := dial("bench")
	if err != nil {
		return out, err
	}
	if err := bus.Provision(ctx, root.JS, bus.Options{Memory: cfg.Memory, NoAudit: cfg.NoAudit}); err != nil {
		return out, err
	}
	b, err := bus.OpenBuckets(ctx, root.JS)
	if err != nil {
		return out, err
	}
	nodes := make([]*pb.Node, cfg.Nodes)
	for i := range nodes {
		nodes[i] = schedsim.Node(fmt.Sprintf("node-%05d", i), benchNodeCPU, benchNodeM, benchNodePods,
			map[string]string{schedsim.LabelZone: fmt.Sprintf("zone-%d", i%benchZones)})
	}
	if err := schedsim.RegisterNodes(ctx, b.Nodes, nodes); err != nil {
		return out, fmt.Errorf("register nodes: %w", err)
	}
	initPods := make([]*pb.Pod, cfg.InitPods)
	for i := range initPods {
		initPods[i] = schedsim.Pod(initNamespace, fmt.Sprintf("init-%d", i), benchPodCPU, benchPodMem, map[string]string{"app": "init"})
	}
	if err := schedsim.Place(ctx, b, initPods, func(i int) string { return nodes[i%len(nodes)].GetMetadata().GetName() }); err != nil {
		return out, fmt.Errorf("place pods: %w", err)
	}

	// The services (or the ceiling's stand-ins), each on its own connection.
	sctx, scancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 8+schedulers)
	defer func() { scancel(); wg.Wait() }()
	start := func(name string, run func(context.Context, *bus.Conn) error) error {
		c, err := dial("bench-" + name)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(sctx, c); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
		return nil
	}
	before := snapshotCounters()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if ceiling {
		if err := startCeiling(start, b); err != nil {
			return out, err
		}
	} else {
		var ready []<-chan struct{}
		if err := start("store", func(ctx context.Context, c *bus.Conn) error {
			s, err := store.New(store.Config{ID: "store-0"}, c)
			if err != nil {
				return err
			}
			return s.Run(ctx)
		}); err != nil {
			return out, err
		}
		if err := start("binder", func(ctx context.Context, c *bus.Conn) error {
			s, err := binder.New(binder.Config{ID: "binder-0"}, c)
			if err != nil {
				return err
			}
			return s.Run(ctx)
		}); err != nil {
			return out, err
		}
		for i := range schedulers {
			c, err := dial(fmt.Sprintf("bench-scheduler-%d", i))
			if err != nil {
				return out, err
			}
			s, err := scheduler.New(scheduler.Config{ID: fmt.Sprintf("sched-%d", i), Logger: quiet}, c)
			if err != nil {
				return out, err
			}
			ready = append(ready, s.Ready())
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Run(sctx); err != nil {
					errs <- fmt.Errorf("scheduler %d: %w", i, err)
				}
			}()
		}
		for _, r := range ready {
			select {
			case <-r:
			case err := <-errs:
				return out, err
			case <-ctx.Done():
				return out, ctx.Err()
			}
		}
	}

	obs, err := observe(ctx, b.Pods, cfg.Pods)
	if err != nil {
		return out, err
	}
	pods := make([]*pb.Pod, cfg.Pods)
	for i := range pods {
		pods[i] = benchPod(cfg.Variant, i)
	}
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile + "." + strings.ReplaceAll(strings.TrimSuffix(label, "(s)"), " ", "-"))
		if err != nil {
			return out, err
		}
		defer stop()
	}
	cpuBefore := processCPU()
	// Commands grouped as admission groups concurrent requests' commands.
	pub := bus.NewBatcher(root.JS, "admission/loadtest")
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	submitted := make(chan error, 1)
	go func() { submitted <- schedsim.Submit(ctx, pub, pods, benchSubmitInflight) }()
	for done := false; !done; {
		select {
		case err := <-submitted:
			if err != nil {
				return out, fmt.Errorf("submit: %w", err)
			}
			submitted = nil
		case err := <-errs:
			return out, err
		case <-obs.done:
			done = true
		case <-progress.C:
			if !cfg.Quiet {
				bound, unsch := obs.counts()
				fmt.Fprintf(os.Stderr, "%s: bound %d unschedulable %d of %d\n", label, bound, unsch, cfg.Pods)
			}
		case <-ctx.Done():
			bound, unsch := obs.counts()
			return out, fmt.Errorf("timed out with %d bound and %d unschedulable of %d: %w", bound, unsch, cfg.Pods, ctx.Err())
		}
	}
	out.counters = counterDelta(before, snapshotCounters())
	out.cpuMsPerPod = float64((processCPU() - cpuBefore).Milliseconds()) / float64(cfg.Pods)
	obs.result(&out)
	return out, nil
}

// processCPU is the CPU time (user and system) this process has used: the measure that stays put
// when something else shares the machine, unlike pods/s.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startCPUProfile profiles the process until the returned stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeMemProfile writes the process's allocation profile to path.
func writeMemProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchPod is measured pod i of a variant.
func benchPod(variant string, i int) *pb.Pod {
	labels := map[string]string{"app": "bench"}
	p := schedsim.Pod(benchNamespace, fmt.Sprintf("pod-%d", i), benchPodCPU, benchPodMem, labels)
	switch variant {
	case VariantAntiAffinity:
		g := fmt.Sprintf("g%d", i%benchAntiAffinityGroups)
		labels["group"] = g
		p.Spec.Affinity = &pb.Affinity{PodAntiAffinity: &pb.PodAffinity{Required: []*pb.PodAffinityTerm{{
			LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{"group": g}},
			TopologyKey:   schedsim.LabelHostname,
		}}}}
	case VariantSpread:
		p.Spec.TopologySpreadConstraints = []*pb.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: schedsim.LabelZone, WhenUnsatisfiable: "DoNotSchedule",
			LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{"app": "bench"}},
		}}
	}
	return p
}

// observer follows the measured pods in the pods bucket: the stream's timestamp of a pod's first
// revision is its creation by the store, that of the first revision with spec.nodeName its binding.
type observer struct {
	want  int
	mu    sync.Mutex
	first map[string]time.Time // key -> created
	bound map[string]time.Time
	unsch map[string]bool
	done  chan struct{}
}

func observe(ctx context.Context, kv jetstream.KeyValue, want int) (*observer, error) {
	o := &observer{want: want, first: map[string]time.Time{}, bound: map[string]time.Time{}, unsch: map[string]bool{}, done: make(chan struct{})}
	w, err := kv.Watch(ctx, bus.PodKeyPrefix(benchNamespace), jetstream.UpdatesOnly())
	if err != nil {
		return nil, err
	}
	go func() {
		defer func() { _ = w.Stop() }()
		closed := false
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			k := e.Key()
			o.mu.Lock()
			_, seen := o.first[k]
			if !seen {
				o.first[k] = e.Created()
			}
			o.mu.Unlock()
			if !seen {
				// The creation: the measured pods are created unbound, so there is nothing to decode,
				// and the observer's CPU is counted in the measurement.
				continue
			}
			// A binding needs only spec.nodeName, read off the wire; the rest (an unschedulable pod's
			// condition) is decoded only for pods that have none.
			bound, unsch := nodeName(e.Value()) != "", false
			if !bound {
				var p pb.Pod
				if proto.Unmarshal(e.Value(), &p) != nil {
					continue
				}
				c := podutil.PodCondition(&p, podutil.PodScheduled)
				unsch = c != nil && c.GetStatus() == podutil.False
			}
			o.mu.Lock()
			if bound {
				if _, ok := o.bound[k]; !ok {
					o.bound[k] = e.Created()
					delete(o.unsch, k)
				}
			} else if unsch {
				o.unsch[k] = true
			}
			finished := len(o.bound)+len(o.unsch) >= o.want
			o.mu.Unlock()
			if finished && !closed {
				closed = true
				close(o.done)
			}
		}
	}()
	return o, nil
}

var (
	podSpecField     = bus.FieldNumber(&pb.Pod{}, "spec")
	podSpecNodeField = bus.FieldNumber(&pb.PodSpec{}, "node_name")
)

// nodeName is spec.nodeName of the encoded pod data ("" when unset or unreadable).
func nodeName(data []byte) string {
	spec, ok := bus.Field(data, podSpecField)
	if !ok {
		return ""
	}
	name, _ := bus.Field(spec, podSpecNodeField)
	return string(name)
}

func (o *observer) counts() (bound, unsch int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.bound), len(o.unsch)
}

func (o *observer) result(r *basicRun) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var first, last time.Time
	ds := make([]float64, 0, len(o.bound))
	for k, c := range o.first {
		if first.IsZero() || c.Before(first) {
			first = c
		}
		if b, ok := o.bound[k]; ok {
			ds = append(ds, float64(b.Sub(c))/float64(time.Millisecond))
			if b.After(last) {
				last = b
			}
		}
	}
	r.bound, r.unschedulable = len(o.bound), len(o.unsch)
	if !last.IsZero() {
		r.seconds = last.Sub(first).Seconds()
		r.rate = float64(r.bound) / r.seconds
	}
	slices.Sort(ds)
	if len(ds) > 0 {
		r.p50 = ds[len(ds)/2]
		r.p99 = ds[min(len(ds)-1, len(ds)*99/100)]
	}
}

// The counters a scheduling run prints with -v (bus metrics, see metrics.Count).
func snapshotCounters() map[string]int64 { return metrics.Counters() }

func counterDelta(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func printCounters(w io.Writer, c map[string]int64) {
	names := make([]string, 0, len(c))
	for k := range c {
		if strings.HasPrefix(k, "binder.") || strings.HasPrefix(k, "batch.") || strings.HasPrefix(k, "scheduler.") || strings.HasPrefix(k, "handled.") || strings.HasPrefix(k, "retries.") || strings.HasPrefix(k, "errors.") {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(w, "  %-44s %9d\n", k, c[k])
	}
}
