package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/freeport"
	"github.com/podbus/podbus/internal/hugepages"
	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/internal/nodestats"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// ScenarioEnvelope measures Kubernetes' scale envelope (5,000 nodes, 150,000 pods by default) with the
// control plane and the simulated nodes in two processes, so that the control plane's memory is its own.
const ScenarioEnvelope = "envelope"

// Envelope defaults, Kubernetes' documented limits.
const (
	envelopeNodes   = 5000
	envelopePods    = 150000
	envelopeSlice   = 10000
	envelopeMaxPods = 110
	envelopeTimeout = 30 * time.Minute
	// envelopeWindow bounds the pods in flight: enough to keep every stage busy, few enough that each
	// slice is measured with the same queues (an unbounded submission measures the drain at the end).
	envelopeWindow = 1000
	envelopeHost   = "envelope"
)

// ErrEnvelope is returned when the envelope's processes or measurements fail.
var ErrEnvelope = errors.New("envelope")

// EnvelopeResult is what the envelope scenario measures.
type EnvelopeResult struct {
	Nodes      int     `json:"nodes"`
	Registered int     `json:"nodes_ready"`
	RegisterS  float64 `json:"registration_s"` // agent process started → every node Ready
	Pods       int     `json:"pods"`
	Ready      int     `json:"pods_ready"`
	Failed     int     `json:"failed_requests"`
	Seconds    float64 `json:"seconds"`          // first POST → last pod Ready
	Throughput float64 `json:"ready_pods_per_s"` // over the whole run
	SliceSize  int     `json:"slice"`
	Slices     []Slice `json:"slices"`
	// LastToFirst is the last full slice's rate over the first's.
	LastToFirst float64 `json:"last_to_first"`
	// LastToFirstSpan is the same over up to four slices at each end (see spanRatio): one slice's rate
	// swings with a busy machine's minute, so the ratio of one pair of slices says little alone.
	LastToFirstSpan float64 `json:"last_to_first_span"`
	SpanSlices      int     `json:"span_slices"`
	// CostLastToFirstSpan is the control plane's CPU per pod over the same slices as LastToFirstSpan,
	// the last over the first: 1 where a pod costs as much in a full cluster as in an empty one.
	CostLastToFirstSpan float64 `json:"cpu_per_pod_last_to_first_span,omitempty"`
	// ProbeLastToFirstSpan is the machine probe's time over the same slices, the last over the first:
	// 1 where the machine kept its speed through the run.
	ProbeLastToFirstSpan float64 `json:"machine_probe_last_to_first_span,omitempty"`

	ControlPlane Memory `json:"control_plane"`
	Agents       Memory `json:"agents"`
	// ControlPlaneCost is what the control plane spent per Ready pod from the first POST to the last
	// pod Ready (nil: not measured).
	ControlPlaneCost *Cost `json:"control_plane_cost,omitempty"`
	// Goroutines of the control-plane process once every pod is Ready (0: not measured).
	Goroutines int `json:"control_plane_goroutines"`
	// LiveHeap of the control plane after a forced collection at the end (0: not measured): what the
	// cluster's objects take, apart from the garbage the GC target lets accumulate up to the limit.
	LiveHeap int64 `json:"control_plane_live_heap_bytes"`

	// THP is the host's transparent huge pages mode: the control plane's cost per pod, late in the
	// run above all, depends on it (docs/operations.md).
	THP string `json:"transparent_hugepages"`
	// GC is the garbage collector the control plane's and the agents' binary was built with, which the
	// late slices' cost depends on (docs/operations.md).
	GC string `json:"garbage_collector"`
	// AgentsMemoryLimit is the simulated agents' soft memory limit, under which they collect only when
	// their heap reaches it (agentsMemoryLimit).
	AgentsMemoryLimit int64 `json:"agents_memory_limit_bytes"`

	ListAll      List `json:"list_all"`      // GET /api/v1/pods in pages of 500, as kubectl does
	ListSelector List `json:"list_selector"` // the same with a label selector matching no pod
	// Kubectl is `kubectl get pods -A` end to end (Items: its lines; Pages: the pages of 500 it asked
	// for), when a kubectl is on the PATH. KubectlUnpaged is the same with --chunk-size=0: one request,
	// so kubectl's own rate limit (kubectlThrottleS) takes no part in it.
	Kubectl        *List `json:"kubectl_get_pods,omitempty"`
	KubectlUnpaged *List `json:"kubectl_get_pods_unpaged,omitempty"`
}

// kubectl pages a list in requests of 500 (--chunk-size), each through client-go's client-side rate
// limiter: 5 requests a second after a burst of 10 (rest.DefaultQPS, rest.DefaultBurst), whatever
// the server answers.
const (
	kubectlChunk = 500
	kubectlQPS   = 5
	kubectlBurst = 10
)

// kubectlThrottleS is the least time kubectl's rate limiter lets a list of that many pages take.
func kubectlThrottleS(pages int) float64 { return float64(max(0, pages-kubectlBurst)) / kubectlQPS }

// Slice is the i-th group of pods, in the order they became Ready.
type Slice struct {
	Pods   int     `json:"pods"`
	ReadyS float64 `json:"ready_at_s"` // its last pod Ready, from the first POST
	Rate   float64 `json:"pods_per_s"` // Pods over the time since the previous slice's last (or the first POST)
	P50    float64 `json:"created_ready_p50_ms"`
	P99    float64 `json:"created_ready_p99_ms"`
	// StageP50 is the median time from POST to each stage (created, scheduled, bound, running), so a
	// slice that slows shows where its pods waited.
	StageP50 [4]float64 `json:"stage_p50_ms"`
	Drain    bool       `json:"drain"` // ended after the last POST
	// CPUPerPodMS is the CPU time the control plane spent over the slice's time, per pod of the slice;
	// AgentsCPUPerPodMS the same of the simulated agents' process (0: not measured). Where the rate
	// moves with the machine's speed, these show whether a pod costs more as the cluster fills.
	CPUPerPodMS       float64 `json:"control_plane_cpu_ms_per_pod,omitempty"`
	AgentsCPUPerPodMS float64 `json:"agents_cpu_ms_per_pod,omitempty"`
	// SystemMSPerPod and PageFaultsPerPod are the control plane's system time (part of CPUPerPodMS)
	// and page faults per pod of the slice: a cost that grows in the kernel (memory faulted in, given
	// back and faulted in again) shows here rather than in the user time.
	SystemMSPerPod   float64 `json:"control_plane_system_ms_per_pod,omitempty"`
	PageFaultsPerPod float64 `json:"control_plane_page_faults_per_pod,omitempty"`
	// GCShare is the part of the control plane's CPU over the slice that its collector took (mark
	// workers, assists, pauses), as the Go runtime counts it (0: not measured): a pod that costs more
	// as the heap grows shows here.
	GCShare float64 `json:"control_plane_gc_share,omitempty"`
	// MachineProbeMS is the median CPU time of the load generator's fixed probe over the slice (see
	// machineProbe; 0: not measured): where it rises with CPUPerPodMS, the machine slowed, not the
	// pipeline.
	MachineProbeMS float64 `json:"machine_probe_ms,omitempty"`

	from, to time.Time
}

// Memory of a process, in bytes, from /proc/<pid>/status.
type Memory struct {
	PeakRSS      int64   `json:"peak_rss_bytes"`       // VmHWM at the end
	RegisterRSS  int64   `json:"registered_rss_bytes"` // VmRSS once every node is Ready
	EndRSS       int64   `json:"end_rss_bytes"`        // VmRSS once every pod is Ready and listed
	PeakPerPodKB float64 `json:"peak_kb_per_pod,omitempty"`
	HugePages    int64   `json:"anon_huge_pages_bytes"` // AnonHugePages at the end
}

// List is one paged list through the API.
type List struct {
	Items   int     `json:"items"`
	Pages   int     `json:"pages"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

// runEnvelope starts `podbus up --nodes 0` and `podbus agent --nodes N` as child processes of the podbus
// binary, then measures registration, the pods' created→ready throughput slice by slice, the control
// plane's memory and list times.
func runEnvelope(ctx context.Context, cfg Config, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	res, err := Envelope(ctx, cfg, progress(cfg))
	if res == nil {
		return err
	}
	// What was measured before a failure is printed as well: where it stopped is a figure too.
	if cfg.JSON {
		if jerr := writeJSON(w, res); jerr != nil && err == nil {
			err = jerr
		}
		return err
	}
	res.Print(w)
	return err
}

func progress(cfg Config) io.Writer {
	if cfg.Quiet {
		return io.Discard
	}
	return os.Stderr
}

// Envelope runs the envelope scenario (see runEnvelope), writing progress lines to log.
func Envelope(ctx context.Context, cfg Config, log io.Writer) (*EnvelopeResult, error) {
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	slice := cfg.Slice
	if slice <= 0 {
		slice = envelopeSlice
	}
	dir, err := dataDir(cfg.DataDir, "podbus-envelope-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	pprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cp, err := startChild(ctx, bin, filepath.Join(dir, "up.log"), []string{"PODBUS_PPROF=" + pprofAddr},
		"up", "--nodes", "0", "--runtime", "fake", "--registry", "off", "--nats-port", "-1",
		"--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "up"), "--schedulers", strconv.Itoa(max(cfg.Schedulers, 1)),
		"--pool-creds", envelopeHost)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	api, natsURL, err := cp.waitUp(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "control plane (pid %d): API %s, NATS %s, pprof http://%s/debug/pprof/\n", cp.cmd.Process.Pid, api, natsURL, pprofAddr)

	// `up` made a NATS credential per role: the observer reads as the admin, the agents as their pool.
	creds := filepath.Join(dir, "up", up.NATSCredsDir)
	admin, pool, ca := natsauth.File(creds, natsauth.RoleAdmin), natsauth.File(creds, natsauth.PoolRole(envelopeHost)),
		filepath.Join(dir, "up", "pki", "ca.crt")
	opts, _, err := natsauth.ClientOptions(admin, ca)
	if err != nil {
		return nil, err
	}
	conn, err := bus.Connect(ctx, natsURL, "podbus-loadtest-envelope", opts...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	res := &EnvelopeResult{Nodes: cfg.Nodes, Pods: cfg.Pods, SliceSize: slice, THP: hostTHP(), GC: binaryGC(bin)}
	cpMem, agMem := &memWatch{}, &memWatch{}
	cpMem.start(ctx, cp.cmd.Process.Pid, pprofAddr)
	defer cpMem.stop()

	agentsPprof, err := freeAddr()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	// The agents stand in for thousands of machines, each with CPUs of its own: their collections are
	// the simulator's cost, not the control plane's. Each one marks every simulated pod, so a collection
	// late in the run would take a slice's CPU from the control plane. Without a GC target, under a soft
	// limit sized to the machine, they collect only when the heap reaches the limit: early, or not at all.
	agentsLimit := agentsMemoryLimit(availableMemory())
	res.AgentsMemoryLimit = agentsLimit
	agents, err := startChild(ctx, bin, filepath.Join(dir, "agent.log"), []string{"PODBUS_PPROF=" + agentsPprof, "GOGC=off"},
		"agent", "--runtime", "fake", "--nodes", strconv.Itoa(cfg.Nodes), "--node", envelopeHost, "--nats", natsURL,
		"--nats-creds", pool, "--nats-ca", ca,
		"--cpu", cfg.NodeCPU, "--memory", cfg.NodeMemory, "--max-pods", strconv.Itoa(cfg.MaxPods),
		"--start-delay", cfg.StartDelay.String(), "--pod-cidr", "10.64.0.0/24", "--memory-limit", strconv.FormatInt(agentsLimit, 10))
	if err != nil {
		return nil, err
	}
	defer agents.stop()
	fmt.Fprintf(log, "agents (pid %d): pprof http://%s/debug/pprof/\n", agents.cmd.Process.Pid, agentsPprof)
	agMem.start(ctx, agents.cmd.Process.Pid, "")
	defer agMem.stop()
	res.Registered, err = waitNodesReady(ctx, conn, cfg.Nodes, agents, log)
	res.RegisterS = time.Since(started).Seconds()
	if err != nil {
		return res, fmt.Errorf("%w: %d of %d nodes Ready after %.1fs: %w", ErrEnvelope, res.Registered, cfg.Nodes, res.RegisterS, err)
	}
	fmt.Fprintf(log, "%d nodes Ready in %.1fs\n", res.Registered, res.RegisterS)
	res.ControlPlane.RegisterRSS = rss(cp.cmd.Process.Pid).rss
	res.Agents.RegisterRSS = rss(agents.cmd.Process.Pid).rss

	pcfg := cfg
	// `up` writes the admin's kubeconfig (the CA and a client certificate) into its data directory.
	pcfg.API, pcfg.NATS, pcfg.Kubeconfig = api, natsURL, filepath.Join(dir, "up", "kubeconfig")
	pcfg.NATSCreds, pcfg.NATSCA = admin, ca
	before := childSpent(ctx, cp.cmd.Process.Pid, pprofAddr)
	probe := newMachineProbe()
	probeCtx, stopProbe := context.WithCancel(ctx)
	var probing sync.WaitGroup
	probing.Go(func() { probe.run(probeCtx) })
	pr, err := run(ctx, pcfg)
	stopProbe()
	probing.Wait()
	if pr != nil {
		res.ControlPlaneCost = costOf(before, childSpent(ctx, cp.cmd.Process.Pid, pprofAddr), pr.Ready)
		res.Ready, res.Failed, res.Seconds, res.Throughput = pr.Ready, pr.Failed, pr.Seconds, pr.Throughput
		res.Slices = sliceRates(pr, slice)
		res.LastToFirst = lastToFirst(res.Slices, slice)
		res.LastToFirstSpan, res.SpanSlices = spanRatio(res.Slices, slice, 4)
		sliceCPU(res.Slices, cpMem, agMem, probe)
		res.CostLastToFirstSpan = costSpanRatio(res.Slices, slice, res.SpanSlices)
		res.ProbeLastToFirstSpan = probeSpanRatio(res.Slices, slice, res.SpanSlices)
	}
	if err != nil {
		res.ControlPlane = cpMem.result(res.ControlPlane.RegisterRSS, res.Pods)
		res.Agents = agMem.result(res.Agents.RegisterRSS, 0)
		return res, fmt.Errorf("%w: pods: %w (control plane log: %s)", ErrEnvelope, err, cp.tail())
	}

	if res.ListAll, err = listPods(ctx, pr.client, api, ""); err != nil {
		return res, err
	}
	if res.ListSelector, err = listPods(ctx, pr.client, api, "podbus-envelope=none"); err != nil {
		return res, err
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		l, err := kubectlGetPods(ctx, kubectl, pcfg.Kubeconfig)
		if err != nil {
			return res, err
		}
		res.Kubectl = &l
		u, err := kubectlGetPods(ctx, kubectl, pcfg.Kubeconfig, "--chunk-size=0")
		if err != nil {
			return res, err
		}
		res.KubectlUnpaged = &u
	}
	res.Goroutines = goroutines(ctx, pprofAddr)
	res.LiveHeap = liveHeap(ctx, pprofAddr)
	res.ControlPlane = cpMem.result(res.ControlPlane.RegisterRSS, res.Pods)
	res.Agents = agMem.result(res.Agents.RegisterRSS, 0)
	return res, nil
}

// sliceRates groups the ready pods in the order they became Ready.
func sliceRates(r *Result, size int) []Slice {
	ready := slices.Clone(r.ready)
	slices.SortFunc(ready, func(a, b readyPod) int { return a.ready.Compare(b.ready) })
	var out []Slice
	prev := r.start
	for i := 0; i < len(ready); i += size {
		part := ready[i:min(i+size, len(ready))]
		end := part[len(part)-1].ready
		lat := make([]float64, len(part))
		for j, p := range part {
			lat[j] = float64(p.ready.Sub(p.sent)) / float64(time.Millisecond)
		}
		pc := percentiles(lat)
		s := Slice{Pods: len(part), ReadyS: end.Sub(r.start).Seconds(), P50: pc.P50, P99: pc.P99, Drain: end.After(r.lastSent),
			from: prev, to: end}
		for st := range s.StageP50 {
			for j, p := range part {
				lat[j] = float64(p.at[st].Sub(p.sent)) / float64(time.Millisecond)
			}
			s.StageP50[st] = percentiles(lat).P50
		}
		if d := end.Sub(prev).Seconds(); d > 0 {
			s.Rate = float64(len(part)) / d
		}
		out = append(out, s)
		prev = end
	}
	return out
}

// lastToFirst is the rate of the last full slice that ended while pods were still being created over
// the first slice's; 0 without two such slices. Slices that end in the drain after the last POST go
// faster, as the API no longer takes its share of the CPU.
func lastToFirst(ss []Slice, size int) float64 {
	for i := len(ss) - 1; i > 0; i-- {
		if ss[i].Pods == size && !ss[i].Drain && ss[0].Rate > 0 {
			return ss[i].Rate / ss[0].Rate
		}
	}
	return 0
}

// spanRatio is the rate of the last k full slices that ended while pods were still being created over
// the rate of the first k, each the pods of its slices over their time; with fewer than 2k such slices
// k shrinks to half of them. It returns the ratio and the k used (0, 0 without two such slices).
func spanRatio(ss []Slice, size, k int) (float64, int) {
	full := fullSlices(ss, size)
	k = min(k, len(full)/2)
	if k == 0 {
		return 0, 0
	}
	rate := func(ss []Slice) float64 {
		var pods, secs float64
		for _, s := range ss {
			pods += float64(s.Pods)
			secs += float64(s.Pods) / s.Rate
		}
		return pods / secs
	}
	return rate(full[len(full)-k:]) / rate(full[:k]), k
}

// fullSlices are the slices of size pods that ended while pods were still being created.
func fullSlices(ss []Slice, size int) []Slice {
	var full []Slice
	for _, s := range ss {
		if s.Pods == size && !s.Drain && s.Rate > 0 {
			full = append(full, s)
		}
	}
	return full
}

// sliceCPU sets each slice's CPU per pod of the control plane and of the agents from their samples,
// the control plane's system time and page faults per pod and its collector's share, and the machine
// probe's median. The last slice ends after the watches' last periodic samples, so each takes one
// more now.
func sliceCPU(ss []Slice, cp, agents *memWatch, probe *machineProbe) {
	cp.sample()
	agents.sample()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	cp.sampleGC(ctx, true)
	cancel()
	spent := func(m *memWatch, s Slice) (procTimes, bool) {
		a, ok1 := m.cpuAt(s.from)
		b, ok2 := m.cpuAt(s.to)
		if !ok1 || !ok2 || s.Pods == 0 {
			return procTimes{}, false
		}
		return procTimes{cpu: b.cpu - a.cpu, sys: b.sys - a.sys, faults: b.faults - a.faults}, true
	}
	ms := func(d time.Duration, pods int) float64 { return float64(d) / float64(time.Millisecond) / float64(pods) }
	for i := range ss {
		s := &ss[i]
		if d, ok := spent(cp, *s); ok {
			s.CPUPerPodMS, s.SystemMSPerPod = ms(d.cpu, s.Pods), ms(d.sys, s.Pods)
			s.PageFaultsPerPod = float64(d.faults) / float64(s.Pods)
		}
		if d, ok := spent(agents, *s); ok {
			s.AgentsCPUPerPodMS = ms(d.cpu, s.Pods)
		}
		if g, ok := cp.gcShare(s.from, s.to); ok {
			s.GCShare = g
		}
		if d, ok := probe.median(s.from, s.to); ok {
			s.MachineProbeMS = float64(d) / float64(time.Millisecond)
		}
	}
}

// probeSpanRatio is the machine probe's mean time over the last k full slices that ended while pods
// were still being created, over the same of the first k; 0 when a slice has no probe.
func probeSpanRatio(ss []Slice, size, k int) float64 {
	return endsRatio(ss, size, k, func(ss []Slice) float64 {
		var sum float64
		for _, s := range ss {
			if s.MachineProbeMS == 0 {
				return 0
			}
			sum += s.MachineProbeMS
		}
		return sum / float64(len(ss))
	})
}

// costSpanRatio is the control plane's CPU per pod over the last k full slices that ended while pods
// were still being created, over the same of the first k; 0 when a slice's CPU was not measured.
func costSpanRatio(ss []Slice, size, k int) float64 {
	return endsRatio(ss, size, k, func(ss []Slice) float64 {
		var pods, ms float64
		for _, s := range ss {
			if s.CPUPerPodMS == 0 {
				return 0
			}
			pods += float64(s.Pods)
			ms += s.CPUPerPodMS * float64(s.Pods)
		}
		return ms / pods
	})
}

// endsRatio is the mean of the last k full slices over the mean of the first k; 0 with fewer than 2k full
// slices or where mean gives 0 (a slice not measured).
func endsRatio(ss []Slice, size, k int, mean func([]Slice) float64) float64 {
	full := fullSlices(ss, size)
	if k == 0 || len(full) < 2*k {
		return 0
	}
	first, last := mean(full[:k]), mean(full[len(full)-k:])
	if first == 0 || last == 0 {
		return 0
	}
	return last / first
}

// waitNodesReady watches the nodes bucket until want nodes of the envelope's host are Ready, the agent
// process exits, or ctx ends; it returns how many were Ready.
func waitNodesReady(ctx context.Context, conn *bus.Conn, want int, agents *child, log io.Writer) (int, error) {
	kv, err := conn.JS.KeyValue(ctx, bus.BucketNodes)
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watcher, err := kv.WatchAll(wctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = watcher.Stop() }()
	ready := map[string]bool{}
	n := 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n < want {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-agents.done:
			return n, fmt.Errorf("agent process exited: %v (log: %s)", agents.err, agents.tail())
		case <-tick.C:
			fmt.Fprintf(log, "nodes Ready %d of %d\n", n, want)
		case e, ok := <-watcher.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return n, err
				}
				return n, fmt.Errorf("watch %s: %w", bus.BucketNodes, bus.ErrWatchEnded)
			}
			if e == nil {
				continue
			}
			var node pb.Node
			if e.Operation() != jetstream.KeyValuePut || proto.Unmarshal(e.Value(), &node) != nil {
				continue
			}
			name := node.GetMetadata().GetName()
			if !strings.HasPrefix(name, envelopeHost+"-") {
				continue
			}
			if r := podutil.NodeIsReady(&node); r != ready[name] {
				ready[name] = r
				if r {
					n++
				} else {
					n--
				}
			}
		}
	}
	return n, nil
}

// listPods lists every pod through the API in pages of 500, as kubectl does, following continue tokens.
func listPods(ctx context.Context, client *http.Client, api, selector string) (List, error) {
	var l List
	start := time.Now()
	cont := ""
	for {
		q := url.Values{"limit": {"500"}}
		if selector != "" {
			q.Set("labelSelector", selector)
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/api/v1/pods?"+q.Encode(), nil)
		if err != nil {
			return l, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return l, fmt.Errorf("%w: list pods: %w", ErrEnvelope, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return l, fmt.Errorf("%w: list pods: %w", ErrEnvelope, err)
		}
		if resp.StatusCode != http.StatusOK {
			return l, fmt.Errorf("%w: list pods: %s: %s", ErrEnvelope, resp.Status, bytes.TrimSpace(body[:min(len(body), 200)]))
		}
		var page struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []struct{} `json:"items"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return l, fmt.Errorf("%w: list pods: %w", ErrEnvelope, err)
		}
		l.Pages++
		l.Items += len(page.Items)
		l.Bytes += int64(len(body))
		if cont = page.Metadata.Continue; cont == "" {
			break
		}
	}
	l.Seconds = time.Since(start).Seconds()
	return l, nil
}

// kubectlGetPods times `kubectl get pods -A` as a user runs it: the Table pages kubectl asks for,
// printed.
func kubectlGetPods(ctx context.Context, kubectl, kubeconfig string, flags ...string) (List, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "get", "pods", "-A", "--no-headers"}, flags...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return List{}, err
	}
	if err := cmd.Start(); err != nil {
		return List{}, fmt.Errorf("%w: kubectl get pods: %w", ErrEnvelope, err)
	}
	var l List
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		l.Items++
		l.Bytes += int64(len(sc.Bytes()) + 1)
	}
	if err := cmd.Wait(); err != nil {
		return l, fmt.Errorf("%w: kubectl get pods: %w: %s", ErrEnvelope, err, bytes.TrimSpace(stderr.Bytes()))
	}
	l.Seconds = time.Since(start).Seconds()
	l.Pages = 1
	if len(flags) == 0 {
		l.Pages = max(1, (l.Items+kubectlChunk-1)/kubectlChunk)
	}
	return l, nil
}

// Print writes the result as one table.
func (r *EnvelopeResult) Print(w io.Writer) {
	gib := func(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
	fmt.Fprintf(w, "envelope: %d nodes, %d pods, slices of %d\n", r.Nodes, r.Pods, r.SliceSize)
	fmt.Fprintf(w, "%-42s %s\n", "what", "measured")
	fmt.Fprintf(w, "%-42s %s\n", "transparent huge pages (host)", thpNote(r.THP, r.ControlPlane.HugePages))
	fmt.Fprintf(w, "%-42s %s\n", "garbage collector (build)", gcNote(r.GC))
	fmt.Fprintf(w, "%-42s %s, collecting only there\n", "simulated agents' memory limit", gib(r.AgentsMemoryLimit))
	fmt.Fprintf(w, "%-42s %d of %d Ready in %.1f s\n", "node registration", r.Registered, r.Nodes, r.RegisterS)
	fmt.Fprintf(w, "%-42s %d of %d Ready, %d failed requests, %.1f s, %.0f pods/s\n", "pods created→ready",
		r.Ready, r.Pods, r.Failed, r.Seconds, r.Throughput)
	for i, s := range r.Slices {
		drain := ""
		if s.Drain {
			drain = "   (drain, after the last POST)"
		}
		cpu := ""
		if s.CPUPerPodMS > 0 {
			cpu = fmt.Sprintf("   CPU per pod: control plane %.2f ms (system %.2f ms, %.1f page faults, GC %.0f %%), agents %.2f ms",
				s.CPUPerPodMS, s.SystemMSPerPod, s.PageFaultsPerPod, 100*s.GCShare, s.AgentsCPUPerPodMS)
		}
		if s.MachineProbeMS > 0 {
			cpu += fmt.Sprintf("   machine probe %.2f ms", s.MachineProbeMS)
		}
		fmt.Fprintf(w, "%-42s %6.0f pods/s   ready at %7.1f s   created→ready p50 %7.0f ms  p99 %7.0f ms   p50 created/scheduled/bound/running %.0f/%.0f/%.0f/%.0f ms%s%s\n",
			fmt.Sprintf("  slice %d (%d pods)", i+1, s.Pods), s.Rate, s.ReadyS, s.P50, s.P99,
			s.StageP50[0], s.StageP50[1], s.StageP50[2], s.StageP50[3], cpu, drain)
	}
	fmt.Fprintf(w, "%-42s %.2f\n", "last full slice before the drain / first", r.LastToFirst)
	if r.SpanSlices > 1 {
		fmt.Fprintf(w, "%-42s %.2f\n", fmt.Sprintf("the last %d full slices / the first %d", r.SpanSlices, r.SpanSlices), r.LastToFirstSpan)
	}
	if r.CostLastToFirstSpan > 0 {
		fmt.Fprintf(w, "%-42s %.2f\n", "control-plane CPU per pod, the same slices", r.CostLastToFirstSpan)
	}
	if r.ProbeLastToFirstSpan > 0 {
		fmt.Fprintf(w, "%-42s %.2f\n", "machine probe's time, the same slices", r.ProbeLastToFirstSpan)
	}
	fmt.Fprintf(w, "%-42s peak %s, at end %s, after registration %s; %.1f KB per pod at peak\n",
		"control-plane RSS", gib(r.ControlPlane.PeakRSS), gib(r.ControlPlane.EndRSS), gib(r.ControlPlane.RegisterRSS), r.ControlPlane.PeakPerPodKB)
	fmt.Fprintf(w, "%-42s peak %s, at end %s\n", "agents RSS (other process)", gib(r.Agents.PeakRSS), gib(r.Agents.EndRSS))
	if r.ControlPlaneCost != nil {
		fmt.Fprintf(w, "%-42s %s\n", "control-plane cost, first POST to last Ready", r.ControlPlaneCost)
	}
	if r.LiveHeap > 0 {
		fmt.Fprintf(w, "%-42s %s, %.1f KB per pod\n", "control-plane live heap at end (after GC)", gib(r.LiveHeap), float64(r.LiveHeap)/float64(max(r.Pods, 1))/1000)
	}
	if r.Goroutines > 0 {
		fmt.Fprintf(w, "%-42s %d\n", "control-plane goroutines at end", r.Goroutines)
	}
	if r.ListAll.Pages == 0 {
		fmt.Fprintf(w, "%-42s not measured\n", "lists")
		return
	}
	fmt.Fprintf(w, "%-42s %.2f s (%d pods, %d pages, %.0f MB)\n", "list pods, pages of 500",
		r.ListAll.Seconds, r.ListAll.Items, r.ListAll.Pages, float64(r.ListAll.Bytes)/1e6)
	fmt.Fprintf(w, "%-42s %.3f s (%d pods)\n", "list pods, selector matching none", r.ListSelector.Seconds, r.ListSelector.Items)
	if r.Kubectl != nil {
		fmt.Fprintf(w, "%-42s %.2f s (%d lines, %d pages; kubectl's own rate limit alone takes %.1f s of it)\n",
			"kubectl get pods -A", r.Kubectl.Seconds, r.Kubectl.Items, r.Kubectl.Pages, kubectlThrottleS(r.Kubectl.Pages))
	}
	if r.KubectlUnpaged != nil {
		fmt.Fprintf(w, "%-42s %.2f s (%d lines, one request)\n", "kubectl get pods -A --chunk-size=0", r.KubectlUnpaged.Seconds, r.KubectlUnpaged.Items)
	}
}

// child is a podbus process of the envelope; its stdout and stderr go to its log file.
type child struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited; err is set then
	err  error
}

// agentsMemoryLimit is the soft memory limit of the simulated agents' process on a machine with
// available bytes free when the run starts (0: unknown): a third of them, from 1 to 8 GiB; 4 GiB when
// unknown. With room for a full cluster's garbage, the agents collect once, early, or never; on a
// smaller machine they collect more often, as any process near its limit does.
func agentsMemoryLimit(available int64) int64 {
	if available <= 0 {
		return 4 << 30
	}
	return min(max(available/3, 1<<30), 8<<30)
}

// availableMemory is the machine's available memory in bytes; 0 when unknown.
func availableMemory() int64 {
	m, err := nodestats.ReadMemory("/")
	if err != nil {
		return 0
	}
	return int64(min(m.Available, uint64(1)<<62))
}

func startChild(ctx context.Context, bin, logPath string, env []string, args ...string) (*child, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%w: start %s %s: %w", ErrEnvelope, bin, args[0], err)
	}
	c := &child{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	return c, nil
}

// waitUp polls the control plane's log until it says where its API and NATS server are.
func (c *child) waitUp(ctx context.Context) (api, natsURL string, err error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		b, _ := os.ReadFile(c.log)
		for _, line := range strings.Split(string(b), "\n") {
			// podbus is up: API http://127.0.0.1:port, NATS nats://127.0.0.1:port
			if rest, ok := strings.CutPrefix(line, "podbus is up: API "); ok {
				a, n, _ := strings.Cut(rest, ", NATS ")
				return a, strings.TrimSpace(n), nil
			}
		}
		select {
		case <-c.done:
			return "", "", fmt.Errorf("%w: podbus up exited: %v (log: %s)", ErrEnvelope, c.err, c.tail())
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-tick.C:
		}
	}
}

// stop ends the process with SIGTERM (SIGKILL after WaitDelay) and waits for it.
func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// tail is the end of the process's log.
func (c *child) tail() string {
	b, _ := os.ReadFile(c.log)
	const n = 2000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// memWatch samples a process's resident memory and its CPU time while it runs.
type memWatch struct {
	pid    int
	vars   string // the process's PODBUS_PPROF address, whose runtime CPU classes are read too ("": not)
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	last   procMem
	cpu    []cpuSample
	gc     []gcSample
}

// gcSample is a process's runtime CPU classes read at a moment: the collector's seconds and the busy
// ones (every class but idle), both as the runtime estimates them.
type gcSample struct {
	at       time.Time
	gc, busy float64
}

// gcEvery is how often a watch reads the runtime's CPU classes: /debug/vars also reads the memstats,
// which stops the world for a moment.
const gcEvery = 2 * time.Second

// cpuSample is a process's times and faults read at a moment.
type cpuSample struct {
	at time.Time
	procTimes
}

type procMem struct{ rss, hwm int64 }

func (m *memWatch) start(ctx context.Context, pid int, pprofAddr string) {
	ctx, m.cancel = context.WithCancel(ctx)
	m.pid, m.vars = pid, pprofAddr
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			m.sample()
			m.sampleGC(ctx, false)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// sample reads the process's memory and CPU time now.
func (m *memWatch) sample() {
	pm := rss(m.pid)
	pt, ok := procStat(m.pid)
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if pm.hwm > 0 {
		m.last = pm
	}
	if ok && (len(m.cpu) == 0 || now.After(m.cpu[len(m.cpu)-1].at)) {
		m.cpu = append(m.cpu, cpuSample{at: now, procTimes: pt})
	}
}

// sampleGC reads the runtime's CPU classes of a watch with a vars address, when gcEvery has passed
// since the last read or when forced.
func (m *memWatch) sampleGC(ctx context.Context, force bool) {
	if m.vars == "" {
		return
	}
	m.mu.Lock()
	due := force || len(m.gc) == 0 || time.Since(m.gc[len(m.gc)-1].at) >= gcEvery
	m.mu.Unlock()
	if !due {
		return
	}
	v, ok := readVars(ctx, m.vars)
	now := time.Now()
	c := v.CPUClasses
	if !ok || c.Total <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.gc) == 0 || now.After(m.gc[len(m.gc)-1].at) {
		m.gc = append(m.gc, gcSample{at: now, gc: c.GC, busy: c.Total - c.Idle})
	}
}

// gcShare is the collector's part of the process's busy CPU between from and to, interpolated between
// the samples around them; false when either is not between two samples or nothing ran.
func (m *memWatch) gcShare(from, to time.Time) (float64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok1 := interpolateGC(m.gc, from)
	b, ok2 := interpolateGC(m.gc, to)
	if !ok1 || !ok2 || b.busy <= a.busy {
		return 0, false
	}
	return (b.gc - a.gc) / (b.busy - a.busy), true
}

func interpolateGC(ss []gcSample, t time.Time) (gcSample, bool) {
	i, _ := slices.BinarySearchFunc(ss, t, func(s gcSample, t time.Time) int { return s.at.Compare(t) })
	switch {
	case i < len(ss) && ss[i].at.Equal(t):
		return ss[i], true
	case i == 0 || i == len(ss):
		return gcSample{}, false
	}
	a, b := ss[i-1], ss[i]
	f := float64(t.Sub(a.at)) / float64(b.at.Sub(a.at))
	return gcSample{at: t, gc: a.gc + f*(b.gc-a.gc), busy: a.busy + f*(b.busy-a.busy)}, true
}

func (m *memWatch) stop() {
	if m.cancel != nil {
		m.cancel()
		m.wg.Wait()
	}
}

// cpuAt is the process's times and faults at t, interpolated between the samples around it; false
// when t is not between two samples.
func (m *memWatch) cpuAt(t time.Time) (procTimes, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return interpolateCPU(m.cpu, t)
}

func interpolateCPU(ss []cpuSample, t time.Time) (procTimes, bool) {
	i, _ := slices.BinarySearchFunc(ss, t, func(s cpuSample, t time.Time) int { return s.at.Compare(t) })
	switch {
	case i < len(ss) && ss[i].at.Equal(t):
		return ss[i].procTimes, true
	case i == 0 || i == len(ss):
		return procTimes{}, false
	}
	a, b := ss[i-1], ss[i]
	f := float64(t.Sub(a.at)) / float64(b.at.Sub(a.at))
	between := func(x, y float64) float64 { return x + f*(y-x) }
	return procTimes{
		cpu:    time.Duration(between(float64(a.cpu), float64(b.cpu))),
		sys:    time.Duration(between(float64(a.sys), float64(b.sys))),
		faults: int64(between(float64(a.faults), float64(b.faults))),
	}, true
}

// result is the memory now (the process still running) and its high-water mark.
func (m *memWatch) result(registered int64, pods int) Memory {
	pm := rss(m.pid)
	if pm.hwm == 0 {
		m.mu.Lock()
		pm = m.last
		m.mu.Unlock()
	}
	out := Memory{PeakRSS: pm.hwm, RegisterRSS: registered, EndRSS: pm.rss, HugePages: hugepages.Backed(m.pid)}
	if pods > 0 {
		out.PeakPerPodKB = float64(pm.hwm) / float64(pods) / 1000
	}
	return out
}

// rss reads VmRSS and VmHWM of pid from /proc (zero when unavailable).
func rss(pid int) procMem {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}
	}
	var pm procMem
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if k == "VmRSS" {
			pm.rss = kb << 10
		} else {
			pm.hwm = kb << 10
		}
	}
	return pm
}

// goroutines counts the control plane's goroutines from its pprof endpoint (0 when unavailable).
func goroutines(ctx context.Context, addr string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	// goroutine profile: total N
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total")))
	return n
}

// liveHeap has the control plane collect its garbage (pprof's heap profile with gc=1) and reads the heap
// left from its /debug/vars (0 when unavailable).
func liveHeap(ctx context.Context, addr string) int64 {
	get := func(path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	if _, err := get("/debug/pprof/heap?gc=1"); err != nil {
		return 0
	}
	b, err := get("/debug/vars")
	if err != nil {
		return 0
	}
	var vars struct {
		Memstats struct {
			HeapAlloc int64 `json:"HeapAlloc"`
		} `json:"memstats"`
	}
	if json.Unmarshal(b, &vars) != nil {
		return 0
	}
	return vars.Memstats.HeapAlloc
}

// freeAddr is a loopback address for a child process to listen on (see freeport.Pick).
func freeAddr() (string, error) {
	p, err := freeport.Pick()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}
