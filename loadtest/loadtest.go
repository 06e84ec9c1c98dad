// Package loadtest submits pods through the Kubernetes API and measures the pipeline: how long each pod
// takes from its POST to created (201), scheduled (decision on pod.scheduled), bound (spec.nodeName in the
// store), running (phase Running) and ready (Ready=True), and the throughput created→ready.
// It starts its own embedded cluster with simulated nodes, or targets a running one.
package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbus/podbus/internal/cli"
	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/nodepool"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/hugepages"
	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/internal/pki"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Config of one run.
type Config struct {
	API  string // target API URL; empty starts an embedded cluster
	NATS string // NATS URL to observe the pipeline (required with API)
	// NATSCreds and NATSCA: the credential (admin's: the observer reads every subject) and CA of a NATS
	// with authorization (internal/natsauth).
	NATSCreds, NATSCA string
	Kubeconfig        string // the target API's CA and credentials, and its server unless API (empty: plain requests)
	Nodes             int
	Pods              int
	Rate              float64 // pods/s; 0 = as fast as possible
	Concurrency       int     // HTTP requests in flight
	Window            int     // pods sent and not yet Ready (nor unschedulable) at most; 0: no bound
	NodeCPU           string
	NodeMemory        string
	MaxPods           int
	CPURequest        string
	MemRequest        string
	StartDelay        time.Duration
	Schedulers        int
	Namespace         string
	Timeout           time.Duration
	JSON              bool
	Memory            bool // embedded cluster keeps streams in memory
	Quiet             bool
	Verbose           bool
	NoAudit           bool   // embedded cluster without the AUDIT stream
	DataDir           string // embedded cluster's storage (default: a temporary directory, on tmpfs when there is one)
	// Scenario: "pipeline" (pods through the API to Ready, simulated agents) or "scheduling-basic"
	// (kube-scheduler's scheduler_perf shape: nodes registered directly, created→bound, see schedbasic.go).
	Scenario string
	Variant  string // scheduling-basic: basic, anti-affinity or spread
	InitPods int    // scheduling-basic: pods placed before the measurement
	Replicas string // scheduling-basic: scheduler replica counts to measure, comma separated
	// NoWarmup: scheduling-basic measures from a fresh process, without the unmeasured run first.
	NoWarmup bool
	// WarmupPods: the pipeline against an embedded cluster first runs this many pods, unmeasured, on a
	// cluster of their own in the same process (0: none); see warmUp.
	WarmupPods int
	// NodePools shapes the embedded cluster's nodes instead of Nodes/NodeCPU/NodeMemory/MaxPods.
	NodePools *nodepool.Pools
	// Runtime "containerd" runs the real-node benchmark instead (runContainerd): Pods real pods (default
	// 20) through an embedded cluster whose only node runs containerd, against the bare runtime.
	Runtime           string
	ContainerdAddress string
	// CPUProfile writes a CPU profile of the whole process (the embedded server and every service):
	// from the first pod sent until every pod is ready, or in scheduling-basic of each measured window,
	// to this path with the run's label appended.
	CPUProfile string
	// MemProfile writes the process's allocation profile once every pod is ready (pipeline): what the
	// run allocated, by call stack (alloc_objects, alloc_space), with what is live then (inuse_*).
	MemProfile string
	// Envelope: pods per measured slice, and the podbus binary to run the control plane and the
	// simulated nodes with (default: this executable).
	Slice  int
	Binary string
	// Deployments: how many, and the replicas of each (--replicas, in the deployments scenario).
	Deployments        int
	DeploymentReplicas int
	// Out: a directory to write every pod's stage times (CSV) and the plots into (out.go); empty: none.
	Out string
	// natsOpts are the observer's extra connection options: an embedded cluster's observer reads it
	// in-process, so that the measuring costs the cluster's cores less.
	natsOpts []nats.Option
}

// ParseFlags reads a Config from command-line arguments.
func ParseFlags(args []string) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.StringVar(&c.API, "api", "", "target API URL (empty: start an embedded cluster)")
	fs.StringVar(&c.NATS, "nats", "", "NATS URL of the target cluster, to observe the pipeline")
	fs.StringVar(&c.NATSCreds, "nats-creds", "", "NATS credential file of the observer (the admin's: it reads every subject)")
	fs.StringVar(&c.NATSCA, "nats-ca", "", "CA certificate (PEM) of the NATS servers' TLS certificates")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig of the target API: its server (unless --api), CA and credentials")
	fs.IntVar(&c.Nodes, "nodes", 100, "simulated nodes (embedded cluster)")
	fs.IntVar(&c.Pods, "pods", 5000, "pods to submit")
	fs.Float64Var(&c.Rate, "rate", 0, "pods per second (0: as fast as possible)")
	fs.IntVar(&c.Concurrency, "concurrency", 64, "API requests in flight")
	fs.IntVar(&c.Window, "window", 0, "pods sent and not yet Ready at most, so that the pipeline's queues stay bounded (0: no bound; envelope: 1000)")
	fs.StringVar(&c.NodeCPU, "node-cpu", "32", "cpu of each simulated node")
	fs.StringVar(&c.NodeMemory, "node-memory", "128Gi", "memory of each simulated node")
	fs.IntVar(&c.MaxPods, "max-pods", 250, "pods per simulated node")
	fs.StringVar(&c.CPURequest, "cpu", "100m", "cpu request of each pod")
	fs.StringVar(&c.MemRequest, "memory", "64Mi", "memory request of each pod")
	fs.DurationVar(&c.StartDelay, "start-delay", 0, "simulated container start time")
	fs.IntVar(&c.Schedulers, "schedulers", 1, "scheduler replicas (embedded cluster)")
	fs.StringVar(&c.Namespace, "namespace", "default", "namespace of the pods")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.BoolVar(&c.JSON, "json", false, "print the result as JSON")
	fs.BoolVar(&c.Memory, "memory-streams", false, "embedded cluster: keep streams in memory")
	fs.BoolVar(&c.NoAudit, "no-audit", false, "embedded cluster: no AUDIT stream (to measure what the audit log costs)")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress lines")
	fs.BoolVar(&c.Verbose, "v", false, "embedded cluster: also print the average handler time per consumer")
	fs.StringVar(&c.DataDir, "data-dir", "", "where the embedded cluster stores its streams (default: a temporary directory under /dev/shm if it exists)")
	fs.StringVar(&c.Scenario, "scenario", ScenarioPipeline, "pipeline, scheduling-basic, envelope or deployments")
	fs.StringVar(&c.Variant, "variant", VariantBasic, "scheduling-basic: basic, anti-affinity or spread")
	fs.IntVar(&c.InitPods, "init-pods", 1000, "scheduling-basic: pods already placed")
	fs.StringVar(&c.Replicas, "replicas", "1,3", "scheduling-basic: scheduler replica counts, comma separated; deployments: replicas of each Deployment (default 50)")
	fs.BoolVar(&c.NoWarmup, "no-warmup", false, "scheduling-basic: no unmeasured run before the measured ones (the first then also pays for growing the process's heap)")
	fs.IntVar(&c.WarmupPods, "warmup-pods", 0, "pipeline, embedded cluster: pods of an unmeasured run first, on a cluster of their own that is then stopped, so that the measured run finds the process's heap grown (0: none; the run then also pays for growing it)")
	fs.IntVar(&c.Deployments, "deployments", deploymentsDefault, "deployments: Deployments to create and roll")
	fs.StringVar(&c.Runtime, "runtime", "fake", "fake: simulated nodes; containerd: real pods on one real node against the bare containerd runtime (root)")
	fs.StringVar(&c.ContainerdAddress, "containerd-address", "", "containerd socket (--runtime containerd; default podbus's)")
	fs.StringVar(&c.MemProfile, "memprofile", "", "pipeline: write the process's allocation profile (since the process started) once every pod is ready")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the run, from the first pod sent to the last ready (scheduling-basic: of each measured window, to this path plus the run's name)")
	fs.IntVar(&c.Slice, "slice", envelopeSlice, "envelope: pods per measured slice")
	fs.StringVar(&c.Binary, "podbus", "", "envelope: podbus binary to run the control plane and the agents with (default: this one)")
	fs.StringVar(&c.Out, "out", "", "pipeline: write every pod's stage times ("+OutCSV+") and plots of the latency CDF per stage and the throughput over time (PNG and SVG) into this directory")
	pools := fs.String("node-pools", "", "embedded cluster: node pools file (YAML, see examples/node-pools.yaml); replaces --nodes")
	if err := cli.Parse(fs, args); err != nil {
		return c, err
	}
	switch c.Scenario {
	case ScenarioPipeline:
	case ScenarioSchedulingBasic:
		// scheduler_perf's SchedulingBasic sizes unless given.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["nodes"] {
			c.Nodes = 5000
		}
		if !set["pods"] {
			c.Pods = 10000
		}
		switch c.Variant {
		case VariantBasic, VariantAntiAffinity, VariantSpread:
		default:
			return c, fmt.Errorf("--variant %q: want %s, %s or %s", c.Variant, VariantBasic, VariantAntiAffinity, VariantSpread)
		}
		if _, err := parseReplicas(c.Replicas); err != nil {
			return c, err
		}
	case ScenarioEnvelope:
		// Kubernetes' scale envelope unless given.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["nodes"] {
			c.Nodes = envelopeNodes
		}
		if !set["pods"] {
			c.Pods = envelopePods
		}
		if !set["max-pods"] {
			c.MaxPods = envelopeMaxPods
		}
		if !set["timeout"] {
			c.Timeout = envelopeTimeout
		}
		if !set["window"] {
			c.Window = envelopeWindow
		}
		if c.API != "" || c.Runtime != "fake" || set["node-pools"] {
			return c, fmt.Errorf("--scenario envelope starts its own processes with simulated nodes: no --api, --runtime or --node-pools")
		}
		if c.Slice <= 0 {
			return c, fmt.Errorf("--slice %d: want at least 1", c.Slice)
		}
	case ScenarioDeployments:
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["nodes"] {
			c.Nodes = deploymentsNodesDefault
		}
		c.DeploymentReplicas = deploymentReplicasDefault
		if set["replicas"] {
			n, err := strconv.Atoi(c.Replicas)
			if err != nil || n < 1 {
				return c, fmt.Errorf("--replicas %q: the deployments scenario wants one count, at least 1", c.Replicas)
			}
			c.DeploymentReplicas = n
		}
		if c.Deployments < 1 || c.Runtime != "fake" {
			return c, fmt.Errorf("--scenario deployments: want --deployments of at least 1 and simulated nodes")
		}
	default:
		return c, fmt.Errorf("--scenario %q: want %s, %s, %s or %s", c.Scenario, ScenarioPipeline, ScenarioSchedulingBasic, ScenarioEnvelope, ScenarioDeployments)
	}
	if *pools != "" {
		p, err := nodepool.Load(*pools)
		if err != nil {
			return c, err
		}
		c.NodePools = &p
		c.Nodes = p.Total()
	}
	switch c.Runtime {
	case "fake":
	case "containerd":
		podsSet := false
		fs.Visit(func(f *flag.Flag) { podsSet = podsSet || f.Name == "pods" })
		if !podsSet {
			c.Pods = realPods
		}
		if c.API != "" {
			return c, fmt.Errorf("--runtime containerd starts its own cluster; it cannot target --api")
		}
	default:
		return c, fmt.Errorf("--runtime %q: fake or containerd", c.Runtime)
	}
	if c.Out != "" && (c.Scenario != ScenarioPipeline || c.Runtime != "fake") {
		return c, fmt.Errorf("--out: only the pipeline scenario with simulated nodes writes pods and plots")
	}
	if c.Kubeconfig != "" && c.API == "" {
		k, err := pki.LoadKubeconfig(c.Kubeconfig)
		if err != nil {
			return c, err
		}
		c.API = k.Server
	}
	if c.API != "" && c.NATS == "" {
		return c, fmt.Errorf("--api needs --nats to observe the pipeline")
	}
	// After --kubeconfig, which may name the target cluster too.
	if c.WarmupPods < 0 {
		return c, fmt.Errorf("--warmup-pods %d: a count of pods, 0 for none", c.WarmupPods)
	}
	if c.WarmupPods > 0 && (c.Scenario != ScenarioPipeline || c.Runtime != "fake" || c.API != "") {
		return c, fmt.Errorf("--warmup-pods: only the pipeline scenario on an embedded cluster of simulated nodes warms up")
	}
	return c, nil
}

// Stage latencies, measured from the moment the pod's POST was sent, or under --rate from the moment
// the schedule meant it to be sent.
const (
	StageCreated   = "created"
	StageScheduled = "scheduled"
	StageBound     = "bound"
	StageRunning   = "running"
	StageReady     = "ready"
)

var stages = []string{StageCreated, StageScheduled, StageBound, StageRunning, StageReady}

// Percentiles of one stage, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Result of a run.
type Result struct {
	Pods          int                    `json:"pods"`
	Nodes         int                    `json:"nodes"`
	Ready         int                    `json:"ready"`
	Failed        int                    `json:"failed_requests"`
	Unschedulable int                    `json:"unschedulable"`
	Seconds       float64                `json:"seconds"`
	SubmitRate    float64                `json:"submit_pods_per_s"`
	Throughput    float64                `json:"ready_pods_per_s"`
	Stages        map[string]Percentiles `json:"stages"`
	// Cost is what the whole process (control plane, simulated agents and this load generator) spent
	// per Ready pod; only with the embedded cluster.
	Cost *Cost `json:"process_cost,omitempty"`
	// THP is the host's transparent huge pages mode, which the cost depends on; only with the
	// embedded cluster.
	THP string `json:"transparent_hugepages,omitempty"`
	// HugePages is how much of the process huge pages backed at the end (podbus advises its heap under
	// the madvise mode: docs/operations.md); only with the embedded cluster.
	HugePages int64 `json:"anon_huge_pages_bytes,omitempty"`
	// GC is the garbage collector the binary was built with ("greentea" or "classic"), which the cost
	// depends on; only with the embedded cluster.
	GC string `json:"garbage_collector,omitempty"`
	// WarmupPods is how many pods an unmeasured run made Ready first, on a cluster of their own in the
	// same process (--warmup-pods).
	WarmupPods int `json:"warmup_pods,omitempty"`

	start    time.Time    // the first POST
	lastSent time.Time    // the last POST answered
	ready    []readyPod   // every ready pod, in no particular order
	pods     []podRecord  // every pod, in the order sent
	rate     float64      // the schedule's pods/s (0: none)
	client   *http.Client // the API client the pods went through
}

// readyPod is when a pod was sent and when it became Ready.
// readyPod is a ready pod's times: sent, each stage (at, as in podTimes) and ready.
type readyPod struct {
	sent, ready time.Time
	at          [4]time.Time
}

// podRecord is a pod's name and times, for --out.
type podRecord struct {
	name string
	podTimes
}

type podTimes struct {
	sent   time.Time // the latencies' origin: the intended start under --rate, else when the POST went
	posted time.Time // when the POST went
	at     [5]time.Time
}

type tracker struct {
	mu    sync.Mutex
	pods  map[string]*podTimes // by name
	uids  map[string]string    // uid -> name
	ready atomic.Int64
	unsch atomic.Int64
	count [5]atomic.Int64
}

func (t *tracker) mark(name string, stage int, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pods[name]
	if p == nil || !p.at[stage].IsZero() {
		return
	}
	p.at[stage] = at
	t.count[stage].Add(1)
	if stage == 4 {
		t.ready.Add(1)
	}
}

// Run executes the load test and writes the report to w.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	if cfg.Scenario == ScenarioSchedulingBasic {
		return runSchedulingBasic(ctx, cfg, w) // each run has its own timeout
	}
	if cfg.Scenario == ScenarioEnvelope {
		return runEnvelope(ctx, cfg, w)
	}
	if cfg.Scenario == ScenarioDeployments {
		return runDeployments(ctx, cfg, w)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if cfg.Runtime == "containerd" {
		return runContainerd(ctx, cfg, w)
	}
	embedded := cfg.API == ""
	warmed := 0
	if !embedded {
		cfg.Nodes = 0 // the target cluster's, which --nodes does not set
	} else {
		var log *slog.Logger
		if cfg.Quiet {
			// The cluster's info lines (the NATS server's banner among them) would bury the result.
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		if cfg.WarmupPods > 0 {
			var err error
			if warmed, err = warmUp(ctx, cfg, log); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		stop, err := startEmbedded(ctx, &cfg, "podbus-loadtest-", log)
		if err != nil {
			return err
		}
		defer stop()
	}
	before := selfSpent()
	res, err := run(ctx, cfg)
	if res != nil {
		res.WarmupPods = warmed
	}
	if res != nil && embedded {
		res.Cost = costOf(before, selfSpent(), res.Ready)
		res.THP, res.GC, res.HugePages = hostTHP(), builtGC(), hugepages.Backed(0)
	}
	if res != nil && cfg.Out != "" {
		if werr := writeOut(cfg.Out, res); werr != nil {
			return errors.Join(err, fmt.Errorf("--out: %w", werr))
		}
		if !cfg.JSON {
			fmt.Fprintf(w, "wrote %s, %s.png/.svg and %s.png/.svg to %s\n", OutCSV, OutLatencyCDF, OutThroughput, cfg.Out)
		}
	}
	if err != nil {
		return err
	}
	if cfg.JSON {
		return writeJSON(w, res)
	}
	where := ""
	if res.Nodes > 0 {
		where = fmt.Sprintf(" on %d nodes", res.Nodes)
	}
	fmt.Fprintf(w, "pods %d%s: %d ready, %d unschedulable, %d failed requests in %.2fs\n",
		res.Pods, where, res.Ready, res.Unschedulable, res.Failed, res.Seconds)
	fmt.Fprintf(w, "submit %.0f pods/s, created→ready throughput %.0f pods/s\n", res.SubmitRate, res.Throughput)
	if res.WarmupPods > 0 {
		fmt.Fprintf(w, "after an unmeasured run of %d pods on a cluster of their own (--warmup-pods)\n", res.WarmupPods)
	}
	if cfg.Rate > 0 {
		fmt.Fprintf(w, "latencies from each pod's intended start at %.0f pods/s\n", cfg.Rate)
	}
	fmt.Fprintf(w, "%-10s %7s %9s %9s %9s %9s %9s\n", "stage", "count", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms")
	for _, s := range stages {
		p := res.Stages[s]
		fmt.Fprintf(w, "%-10s %7d %9.1f %9.1f %9.1f %9.1f %9.1f\n", s, p.Count, p.P50, p.P90, p.P99, p.P999, p.Max)
	}
	if res.Cost != nil {
		fmt.Fprintf(w, "whole process (cluster, agents, load generator): %s\n", res.Cost)
		fmt.Fprintf(w, "transparent huge pages: %s\n", thpNote(res.THP, res.HugePages))
		fmt.Fprintf(w, "garbage collector: %s\n", gcNote(res.GC))
	}
	if cfg.Verbose {
		printHandlerTimes(w)
		fmt.Fprintln(w, "conflicts and retries:")
		printCounters(w, metrics.Counters())
	}
	return nil
}

// apiClient speaks to cfg.API as the user of cfg.Kubeconfig.
func apiClient(cfg Config) (*http.Client, error) {
	var k pki.Kubeconfig
	if cfg.Kubeconfig != "" {
		var err error
		if k, err = pki.LoadKubeconfig(cfg.Kubeconfig); err != nil {
			return nil, err
		}
	}
	rt, err := k.Transport(&http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency})
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt, Timeout: 60 * time.Second}, nil
}

// ensureNamespace creates the pods' namespace unless it exists: the API refuses pods in a namespace
// that does not.
func ensureNamespace(ctx context.Context, client *http.Client, api, ns string) error {
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, ns)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/api/v1/namespaces", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
		return fmt.Errorf("create namespace %s: %s", ns, resp.Status)
	}
	return nil
}

func run(ctx context.Context, cfg Config) (*Result, error) {
	opts, _, err := natsauth.ClientOptions(cfg.NATSCreds, cfg.NATSCA)
	if err != nil {
		return nil, err
	}
	conn, err := bus.Connect(ctx, cfg.NATS, "podbus-loadtest", append(opts, cfg.natsOpts...)...)
	if err != nil {
		return nil, err
	}
	defer conn.NC.Close()
	runID := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	t := &tracker{pods: make(map[string]*podTimes, cfg.Pods), uids: map[string]string{}}
	names := make([]string, cfg.Pods)
	for i := range names {
		names[i] = fmt.Sprintf("lt-%s-%d", runID, i)
		t.pods[names[i]] = &podTimes{}
	}

	stopObserving, err := t.observe(ctx, conn, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	defer stopObserving()

	client, err := apiClient(cfg)
	if err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, client, cfg.API, cfg.Namespace); err != nil {
		return nil, err
	}
	url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods", cfg.API, cfg.Namespace)
	var failed atomic.Int64
	sub := submitter{n: cfg.Pods, rate: cfg.Rate, concurrency: cfg.Concurrency,
		gate: func(ctx context.Context, i int) bool { return t.waitWindow(ctx, cfg.Window, int64(i)-failed.Load()) },
		send: func(ctx context.Context, i int, intended time.Time) {
			body := podJSON(names[i], cfg)
			t.mu.Lock()
			t.pods[names[i]].sent, t.pods[names[i]].posted = intended, time.Now()
			t.mu.Unlock()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				failed.Add(1)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				failed.Add(1)
				return
			}
			t.mark(names[i], 0, time.Now())
		}}
	if !cfg.Quiet {
		pctx, stopProgress := context.WithCancel(ctx)
		var pwg sync.WaitGroup
		defer func() { stopProgress(); pwg.Wait() }()
		bar := newProgressBar(func() progressCounts {
			return progressCounts{total: cfg.Pods, created: t.count[0].Load(), scheduled: t.count[1].Load(),
				bound: t.count[2].Load(), running: t.count[3].Load(), ready: t.ready.Load(), un: t.unsch.Load(),
				failed: failed.Load()}
		})
		pwg.Go(func() { bar.run(pctx) })
	}
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	start := sub.run(ctx)
	submitted := time.Since(start)

	// Wait until every accepted pod is ready or unschedulable.
	var timedOut error // the result so far comes with it
	for {
		created := t.count[0].Load()
		if t.ready.Load()+t.unsch.Load() >= created {
			break
		}
		select {
		case <-ctx.Done():
			timedOut = fmt.Errorf("timed out: %d of %d created pods ready: %w", t.ready.Load(), created, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
		if timedOut != nil {
			break
		}
	}
	if cfg.MemProfile != "" {
		if err := writeMemProfile(cfg.MemProfile); err != nil {
			return nil, err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	res := &Result{Pods: cfg.Pods, Nodes: cfg.Nodes, Ready: int(t.ready.Load()), Failed: int(failed.Load()),
		Unschedulable: int(t.unsch.Load()), Stages: map[string]Percentiles{}}
	var last time.Time
	hists := make([]histogram, len(stages))
	for _, name := range names {
		p := t.pods[name]
		res.pods = append(res.pods, podRecord{name: name, podTimes: *p})
		if p.sent.IsZero() {
			continue
		}
		for si := range stages {
			if !p.at[si].IsZero() {
				hists[si].Record(p.at[si].Sub(p.sent))
			}
		}
		if !p.at[4].IsZero() {
			last = maxTime(last, p.at[4])
			res.ready = append(res.ready, readyPod{sent: p.sent, ready: p.at[4], at: [4]time.Time(p.at[:4])})
		}
	}
	for si, s := range stages {
		res.Stages[s] = hists[si].percentiles()
	}
	total := last.Sub(start)
	if last.IsZero() {
		total = time.Since(start)
	}
	res.Seconds = total.Seconds()
	res.SubmitRate = float64(t.count[0].Load()) / submitted.Seconds()
	res.Throughput = float64(res.Ready) / total.Seconds()
	res.start, res.lastSent, res.client, res.rate = start, start.Add(submitted), client, cfg.Rate
	return res, timedOut
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitWindow waits until fewer than window of the sent pods are neither Ready nor unschedulable (a
// window of 0 does not wait); false when ctx ends first.
func (t *tracker) waitWindow(ctx context.Context, window int, sent int64) bool {
	if window <= 0 {
		return true
	}
	for sent-t.ready.Load()-t.unsch.Load() >= int64(window) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Millisecond):
		}
	}
	return true
}

// trackedPodMask is what observe reads of a pod: the load generator decodes every change of every
// pod, on the same cores as the cluster it measures.
var trackedPodMask = bus.NewMask(&pb.Pod{}, "metadata.name", "spec.node_name", "status.phase",
	"status.conditions.type", "status.conditions.status")

// trackedDecisionMask is what the tracker reads of a decision: not the pod it carries.
var trackedDecisionMask = bus.NewMask(&pb.SchedulingDecision{}, "namespace", "name", "unschedulable")

// observe marks the stages of the tracker's pods as they happen: decisions on pod.scheduled (a core
// subscription, no consumer state) and the pods bucket's updates (bound, running, ready).
func (t *tracker) observe(ctx context.Context, conn *bus.Conn, namespace string) (stop func(), err error) {
	sub, err := conn.NC.Subscribe(bus.SubjPodScheduled, func(m *nats.Msg) {
		now := time.Now()
		entries, _ := bus.Unbatch(m.Subject, m.Header, m.Data)
		for _, e := range entries {
			var d pb.SchedulingDecision
			if pruned, ok := bus.Prune(e.Data, trackedDecisionMask); !ok || proto.Unmarshal(pruned, &d) != nil ||
				d.GetNamespace() != namespace || d.GetUnschedulable() {
				continue
			}
			t.mark(d.GetName(), 1, now)
		}
	})
	if err != nil {
		return nil, err
	}
	kv, err := conn.JS.KeyValue(ctx, bus.BucketPods)
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	wctx, wcancel := context.WithCancel(ctx)
	watcher, err := kv.Watch(wctx, bus.PodKeyPrefix(namespace), jetstream.UpdatesOnly())
	if err != nil {
		wcancel()
		_ = sub.Unsubscribe()
		return nil, err
	}
	unsch := map[string]bool{}
	go func() {
		for e := range watcher.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			now := time.Now()
			var p pb.Pod
			if pruned, ok := bus.Prune(e.Value(), trackedPodMask); !ok || proto.Unmarshal(pruned, &p) != nil {
				continue
			}
			name := p.GetMetadata().GetName()
			if p.GetSpec().GetNodeName() != "" {
				t.mark(name, 2, now)
			} else if c := podutil.PodCondition(&p, podutil.PodScheduled); c != nil && c.GetStatus() == podutil.False && !unsch[name] {
				unsch[name] = true
				t.unsch.Add(1)
			}
			if p.GetStatus().GetPhase() == "Running" {
				t.mark(name, 3, now)
			}
			if c := podutil.PodCondition(&p, podutil.PodReady); c != nil && c.GetStatus() == podutil.True {
				t.mark(name, 4, now)
			}
		}
	}()
	return func() { wcancel(); _ = sub.Unsubscribe() }, nil
}

// tmpParent is where temporary data dirs go: tmpfs when there is one. The file store writes consumer state
// files ~10 times a second per consumer; on tmpfs that measures podbus rather than the disk (--data-dir
// puts it on a real disk).
// dataDir makes a temporary directory named prefix… under parent (default tmpParent()).
func dataDir(parent, prefix string) (string, error) {
	if parent == "" {
		parent = tmpParent()
	}
	if parent != "" {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return "", err
		}
	}
	return os.MkdirTemp(parent, prefix)
}

// warmUp runs cfg's pipeline with WarmupPods pods, unmeasured, on an embedded cluster of its own, then
// stops it. The first cluster of a fresh process grows the Go heap to its working size, and the kernel
// zeroes each page of it on its first touch: a control plane that has been running does not pay that
// for its next pods. The measured run that follows starts a fresh cluster (no pods, no history) in a
// process whose heap has grown, as scheduling-basic's unmeasured run gives its measured ones. It returns
// how many pods the warm-up made Ready.
func warmUp(ctx context.Context, cfg Config, log *slog.Logger) (int, error) {
	warm := cfg
	warm.Pods, warm.WarmupPods, warm.Rate = cfg.WarmupPods, 0, 0
	warm.CPUProfile, warm.MemProfile, warm.Out, warm.Quiet = "", "", "", true
	stop, err := startEmbedded(ctx, &warm, "podbus-loadtest-warmup-", log)
	if err != nil {
		return 0, err
	}
	defer stop()
	res, err := run(ctx, warm)
	if err != nil {
		return 0, err
	}
	if res.Ready < warm.Pods {
		return 0, fmt.Errorf("%d of %d pods ready (%d unschedulable, %d requests failed)", res.Ready, warm.Pods, res.Unschedulable, res.Failed)
	}
	return res.Ready, nil
}

// startEmbedded starts a cluster of simulated nodes shaped by cfg, its storage in a new dataDir, and
// points cfg's API, NATS and kubeconfig at it; stop stops it and removes the directory. log nil: the
// cluster's default logger.
func startEmbedded(ctx context.Context, cfg *Config, prefix string, log *slog.Logger) (stop func(), err error) {
	dir, err := dataDir(cfg.DataDir, prefix)
	if err != nil {
		return nil, err
	}
	cctx, ccancel := context.WithCancel(ctx)
	cl, err := up.Start(cctx, up.Config{
		Logger:   log,
		NATSPort: -1, DataDir: dir, APIAddr: "127.0.0.1:0", Nodes: cfg.Nodes, NodeCPU: cfg.NodeCPU,
		NodeMemory: cfg.NodeMemory, MaxPods: cfg.MaxPods, StartDelay: cfg.StartDelay,
		Schedulers: cfg.Schedulers, Memory: cfg.Memory, NoAudit: cfg.NoAudit, NodePools: cfg.NodePools,
	})
	if err != nil {
		ccancel()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cfg.API, cfg.NATS, cfg.Kubeconfig = cl.APIURL, cl.NATSURL, cl.Kubeconfig
	cfg.natsOpts = []nats.Option{bus.InProcess(cl.Server())}
	return func() {
		ccancel()
		_ = cl.Wait()
		_ = os.RemoveAll(dir)
	}, nil
}

func tmpParent() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return ""
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// percentiles summarises a few latencies in milliseconds exactly (the run's stages go through a
// histogram instead, see histogram.percentiles).
func percentiles(ds []float64) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Percentiles{Count: len(ds), P50: at(0.50), P90: at(0.90), P99: at(0.99), P999: at(0.999), Max: ds[len(ds)-1]}
}

func (h *histogram) percentiles() Percentiles {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return Percentiles{Count: int(h.Count()), P50: ms(h.Quantile(0.50)), P90: ms(h.Quantile(0.90)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max())}
}

func podJSON(name string, cfg Config) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q,"labels":{"app":"loadtest"}},`+
		`"spec":{"containers":[{"name":"app","image":"registry.local/pause:3.10","resources":{"requests":{"cpu":%q,"memory":%q}}}]}}`,
		name, cfg.Namespace, cfg.CPURequest, cfg.MemRequest)
}

// printHandlerTimes prints, per durable consumer of this process, messages handled and the mean time a
// handler took (the bus counters handled.<durable> and handle_us.<durable>).
func printHandlerTimes(w io.Writer) {
	var names []string
	expvar.Get("podbus").(*expvar.Map).Do(func(kv expvar.KeyValue) {
		if n, ok := strings.CutPrefix(kv.Key, "handle_us."); ok {
			names = append(names, n)
		}
	})
	slices.Sort(names)
	fmt.Fprintf(w, "%-24s %9s %12s\n", "consumer", "handled", "mean µs")
	for _, n := range names {
		h := metrics.Counter("handled." + n)
		if h == 0 {
			continue
		}
		fmt.Fprintf(w, "%-24s %9d %12.0f\n", n, h, float64(metrics.Counter("handle_us."+n))/float64(h))
	}
}
