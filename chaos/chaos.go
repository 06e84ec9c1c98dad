// Package chaos runs podbus as separate processes on a three-node NATS cluster on loopback, drives a
// workload through the API, injects faults chosen by a seed, and then checks the whole history with
// the audit checker (audit/check): nothing lost, nothing bound twice, no node overcommitted at any
// revision, and everything settled once the faults stop.
//
//	3 × podbus nats (cluster, R3 streams, TLS, a credential per role) ◀── store, 2 schedulers, 2 binders,
//	  └─ routes through the harness's proxies                  status, 2 workloads, 2 controllers,
//	                                                           admission, 3 agents
//	        ▲                                          ▲
//	        └──── faults (seeded): kill -9 + restart, SIGSTOP/SIGCONT, NATS node killed or stopped, NATS
//	              node partitioned, NATS store full (root: a tmpfs), agent clock stepped
//	workload ──HTTP──▶ admission: creates, updates and deletes, each answer logged (workload.jsonl)
//
// Every fault is logged with the seed (faults.jsonl), so a failing run can be replayed with the same
// seed (the moments depend on the machine's pace, the choices do not).
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/podbus/podbus/audit/check"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/freeport"
	"github.com/podbus/podbus/internal/natsauth"
)

// Config configures a run.
type Config struct {
	Bin        string        // the podbus binary (required)
	Dir        string        // working directory: NATS storage, logs, the workload and fault logs (required)
	Seed       int64         // chooses the workload and the faults
	Duration   time.Duration // of the workload and the faults (default 10m)
	FaultEvery time.Duration // mean time between faults (default 5s)
	Settle     time.Duration // how long after the last fault everything must be settled (default 2m)
	Pods       int           // pods the workload keeps, about (default 30)
	Log        io.Writer     // progress and faults (default os.Stderr)
	// OpenBus runs the NATS servers without authorization or TLS; by default every process holds its
	// role's credential (package natsauth) and speaks TLS, as a real deployment does.
	OpenBus bool
	// StoreLimit is the size of the tmpfs on one member's store directory that the disk-full fault fills
	// (default 512MiB); without root there is none, and no such fault.
	StoreLimit int64
	// Known lists violation kinds (check.Kind*) of open bugs: reported, but a history whose violations
	// are all of these kinds counts as settled and the run does not fail for them.
	Known []string
	// Containerd is the socket of a containerd: one agent runs its pods with it (agent/cri), and the
	// checker holds that node's containers to the history (check.KindLeftover). "": simulated only.
	Containerd string
	// BrokenRealNode runs the real node's agent with --test-keep-sandboxes: it never removes a deleted
	// pod's containers, for a test to show that the checker names them.
	BrokenRealNode bool
}

// Report is what a run did and found.
type Report struct {
	Seed     int64
	Duration time.Duration
	Faults   map[string]int // by kind
	Created  int            // 201s
	Updated  int            // updates answered 200
	Deleted  int            // deletes answered 200
	// Deployments: creates answered 201, scales and rolls (template changes) answered 200, deletes
	// answered 200.
	DeploysCreated, DeploysScaled, DeploysRolled, DeploysDeleted int
	Crashes                                                      int // processes that exited without a fault
	Violations                                                   []check.Violation
	// Quiescence is the time from the end of the last fault to the first clean check; -1 when the run
	// never settled within Config.Settle.
	Quiescence time.Duration
	Records    int // audit records checked
	// RealNode is the node on containerd ("" without one); RealCreated and RealDeleted count the
	// workload's pods meant for it, created (201) and deleted (200).
	RealNode                 string
	RealCreated, RealDeleted int
}

// ErrViolations is returned by Run when the checker found any.
var ErrViolations = check.ErrViolations

// Bounds of one settle attempt's reads of the audit log: whether it caught up with its sources (a few
// stream infos), and the whole check (it reads every record). Each is well under the default settle
// window, so that an attempt that fails at its deadline leaves time for another.
const (
	caughtUpAttempt = 15 * time.Second
	checkAttempt    = time.Minute
)

// Run brings the deployment up, runs the workload and the faults for cfg.Duration, waits for it to
// settle, checks the history, and tears everything down.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Minute
	}
	if cfg.FaultEvery <= 0 {
		cfg.FaultEvery = 5 * time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 2 * time.Minute
	}
	if cfg.Pods <= 0 {
		cfg.Pods = 30
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.StoreLimit <= 0 {
		cfg.StoreLimit = 512 << 20
	}
	rep := Report{Seed: cfg.Seed, Duration: cfg.Duration, Faults: map[string]int{}, Quiescence: -1}
	if cfg.Bin == "" || cfg.Dir == "" {
		return rep, errors.New("chaos: Bin and Dir are required")
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return rep, err
	}
	h := &harness{cfg: cfg}
	h.logf("chaos run: seed %d, %s, a fault every %s or so, logs in %s", cfg.Seed, cfg.Duration, cfg.FaultEvery, cfg.Dir)
	superCtx, stopSupervising := context.WithCancel(ctx)
	defer func() {
		stopSupervising()
		h.shutdown()
	}()
	if err := h.up(ctx, superCtx); err != nil {
		return rep, err
	}
	opts, err := h.clientOptions(natsauth.RoleReader)
	if err != nil {
		return rep, err
	}
	conn, err := bus.Connect(ctx, strings.Join(h.natsURLs, ","), "podbus-chaos", opts...)
	if err != nil {
		return rep, err
	}
	defer conn.Close()

	wl, err := newWorkload(h, cfg, filepath.Join(cfg.Dir, "workload.jsonl"))
	if err != nil {
		return rep, err
	}
	defer wl.close()
	fl, err := newFaults(h, cfg, filepath.Join(cfg.Dir, "faults.jsonl"))
	if err != nil {
		return rep, err
	}
	defer fl.close()

	var sampleJS []streamInfoer
	for i, url := range h.natsURLs {
		c, err := bus.Connect(ctx, url, fmt.Sprintf("podbus-chaos-origins-%d", i+1), opts...)
		if err != nil {
			return rep, err
		}
		defer c.Close()
		sampleJS = append(sampleJS, c.JS)
	}
	sampler := newOriginSampler(sampleJS...)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() { sampler.run(sampleCtx, 100*time.Millisecond) })
	defer func() {
		stopSampling()
		sampling.Wait()
		if err := sampler.save(filepath.Join(cfg.Dir, "origins.json")); err != nil {
			h.logf("origins: %v", err)
		}
	}()

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	var wg sync.WaitGroup
	wg.Go(func() { wl.run(runCtx) })
	wg.Go(func() { fl.run(runCtx) })
	wg.Wait()
	cancel()
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	h.resumeAll()
	lastFault := fl.lastEnd()
	h.logf("workload and faults stopped: %d created, %d updated, %d deleted, deployments %d created, %d scaled, %d rolled, %d deleted, faults %v; waiting for the system to settle",
		wl.created, wl.updated, wl.deleted, wl.deploysCreated, wl.deploysScaled, wl.deploysRolled, wl.deploysDeleted, fl.counts)

	ops, err := wl.ops()
	if err != nil {
		return rep, err
	}
	o := check.Options{Workload: ops, EndState: true, Containers: h.containerListers()}
	deadline := time.Now().Add(cfg.Settle)
	var res check.Result
	for i := 0; ; i++ {
		// Each attempt has its own deadline: a request sent across a blackholed route gets no answer,
		// and one lost request must not use up the whole settle window.
		actx, cancel := context.WithTimeout(ctx, caughtUpAttempt)
		ok, err := check.CaughtUp(actx, conn.JS, "")
		cancel()
		if err != nil {
			h.logf("audit log: %v", err)
		} else if !ok && i%5 == 4 {
			h.logf("the audit log has not caught up with its sources yet")
		}
		if ok {
			o.Origins = sampler.origins()
			actx, cancel := context.WithTimeout(ctx, checkAttempt)
			res, err = check.Check(actx, conn.JS, o)
			cancel()
			if err == nil {
				rep.Quiescence = time.Since(lastFault)
				break
			}
			if errors.Is(err, check.ErrViolations) && onlyKnown(res.Violations, cfg.Known) {
				h.logf("settled with %d violations of known, open kinds %v", len(res.Violations), cfg.Known)
				rep.Quiescence = time.Since(lastFault)
				break
			}
			if !errors.Is(err, check.ErrViolations) {
				h.logf("check: %v", err)
			} else if i%5 == 4 {
				h.logf("not settled yet: %d violations, the first: %v", len(res.Violations), res.Violations[0])
			}
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	rep.Faults, rep.Created, rep.Updated, rep.Deleted = fl.counts, wl.created, wl.updated, wl.deleted
	rep.DeploysCreated, rep.DeploysScaled, rep.DeploysRolled, rep.DeploysDeleted = wl.deploysCreated, wl.deploysScaled, wl.deploysRolled, wl.deploysDeleted
	rep.Violations, rep.Records = res.Violations, res.Records
	rep.Crashes = h.crashes()
	if h.real != nil {
		rep.RealNode, rep.RealCreated, rep.RealDeleted = h.real.name, wl.realCreated, wl.realDeleted
	}
	if rep.Quiescence < 0 {
		return rep, fmt.Errorf("%w: not settled %s after the last fault, %d violations (seed %d)", ErrViolations, cfg.Settle, len(rep.Violations), cfg.Seed)
	}
	return rep, nil
}

// onlyKnown: every violation is of one of the known kinds.
func onlyKnown(vs []check.Violation, known []string) bool {
	for _, v := range vs {
		if !slices.Contains(known, v.Kind) {
			return false
		}
	}
	return len(known) > 0
}

// WriteReport prints the run's table and its violations.
func WriteReport(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\t%d\n", r.Seed)
	fmt.Fprintf(tw, "duration\t%s\n", r.Duration)
	kinds := make([]string, 0, len(r.Faults))
	total := 0
	for k, n := range r.Faults {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(tw, "faults: %s\t%d\n", k, r.Faults[k])
	}
	fmt.Fprintf(tw, "faults: total\t%d\n", total)
	fmt.Fprintf(tw, "processes exited on their own\t%d\n", r.Crashes)
	fmt.Fprintf(tw, "pods created (201)\t%d\n", r.Created)
	fmt.Fprintf(tw, "pods updated (200)\t%d\n", r.Updated)
	fmt.Fprintf(tw, "pods deleted (200)\t%d\n", r.Deleted)
	fmt.Fprintf(tw, "deployments created (201)\t%d\n", r.DeploysCreated)
	fmt.Fprintf(tw, "deployments scaled (200)\t%d\n", r.DeploysScaled)
	fmt.Fprintf(tw, "deployments rolled (200)\t%d\n", r.DeploysRolled)
	fmt.Fprintf(tw, "deployments deleted (200)\t%d\n", r.DeploysDeleted)
	if r.RealNode != "" {
		fmt.Fprintf(tw, "real node (containerd)\t%s: %d pods created, %d deleted\n", r.RealNode, r.RealCreated, r.RealDeleted)
	}
	fmt.Fprintf(tw, "audit records checked\t%d\n", r.Records)
	fmt.Fprintf(tw, "violations\t%d\n", len(r.Violations))
	if r.Quiescence >= 0 {
		fmt.Fprintf(tw, "last fault to quiescence\t%s\n", r.Quiescence.Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(tw, "last fault to quiescence\tnot settled\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range r.Violations {
		if _, err := fmt.Fprintln(w, v); err != nil {
			return err
		}
	}
	return nil
}

// harness holds the processes.
type harness struct {
	cfg      Config
	nats     []*proc
	services []*proc // store, schedulers, binders, status, workload controllers, controllers, admission
	agents   []*proc
	clocks   []string // the agents' clock offset files
	natsURLs []string
	natsMon  []string // each member's monitoring address
	routes   *routeNet
	auth     *natsauth.Initialized // nil: an open bus
	// full is the member whose store directory is a tmpfs (tmpfs its mount point), -1 for none.
	full  int
	tmpfs string
	api   string
	real  *realNode // the agent on containerd, nil for none (realnode.go)
	logMu sync.Mutex
}

func (h *harness) logf(format string, args ...any) {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	fmt.Fprintf(h.cfg.Log, time.Now().UTC().Format("15:04:05.000")+" "+format+"\n", args...)
}

func (h *harness) all() []*proc {
	return append(append(append([]*proc(nil), h.nats...), h.services...), h.agents...)
}

func (h *harness) newProc(name string, args ...string) *proc {
	return &proc{name: name, bin: h.cfg.Bin, args: args, logs: logPath(h.cfg.Dir, name)}
}

// up starts the NATS cluster, then the services, and waits for the API to list the three nodes.
func (h *harness) up(ctx, superCtx context.Context) error {
	const members = 3
	ports := make([][3]int, members) // client, route, http
	for i := range ports {
		for j := range ports[i] {
			p, err := freeport.Pick()
			if err != nil {
				return err
			}
			ports[i][j] = p
		}
	}
	agentNames := make([]string, members)
	for i := range members {
		agentNames[i] = fmt.Sprint("n", i+1)
	}
	if err := h.upRealNode(ctx, agentNames); err != nil {
		return err
	}
	if !h.cfg.OpenBus {
		if err := h.initAuth(agentNames); err != nil {
			return err
		}
	}
	targets := make([]string, members)
	for i := range members {
		targets[i] = fmt.Sprintf("127.0.0.1:%d", ports[i][1])
	}
	rn, err := newRouteNet(superCtx, targets)
	if err != nil {
		return err
	}
	h.routes = rn
	h.full = -1
	if os.Geteuid() != 0 {
		h.logf("not root: no tmpfs store, so no %s faults", FaultDiskFull)
	} else {
		k := rand.New(rand.NewSource(h.cfg.Seed + 2)).Intn(members)
		dir := filepath.Join(h.cfg.Dir, fmt.Sprint("nats-", k+1))
		if err := mountTmpfs(dir, h.cfg.StoreLimit); err != nil {
			h.logf("no %s faults: %v", FaultDiskFull, err)
		} else {
			h.full, h.tmpfs = k, dir
			h.logf("nats-%d stores on a %d MiB tmpfs (%s)", k+1, h.cfg.StoreLimit>>20, dir)
		}
	}
	for i := range members {
		var routes []string
		for j := range members {
			if j != i {
				routes = append(routes, "nats://"+rn.proxies[i][j])
			}
		}
		name := fmt.Sprint("nats-", i+1)
		args := []string{"nats", "--name", name, "--port", strconv.Itoa(ports[i][0]),
			"--store", filepath.Join(h.cfg.Dir, name), "--cluster-name", "chaos",
			"--cluster-listen", targets[i], "--routes", strings.Join(routes, ","), "--cluster-advertise", rn.advertise,
			"--http-port", strconv.Itoa(ports[i][2])}
		if h.auth != nil {
			args = append(args, "--auth", h.auth.Conf, "--tls-cert", h.auth.Cert, "--tls-key", h.auth.Key, "--tls-ca", h.auth.CA)
		}
		h.nats = append(h.nats, h.newProc(name, args...))
		h.natsURLs = append(h.natsURLs, fmt.Sprintf("nats://127.0.0.1:%d", ports[i][0]))
		h.natsMon = append(h.natsMon, fmt.Sprintf("127.0.0.1:%d", ports[i][2]))
	}
	for _, p := range h.nats {
		if err := p.start(); err != nil {
			return err
		}
	}
	for i := range members {
		url := "http://" + h.natsMon[i] + "/healthz"
		if err := poll(ctx, 60*time.Second, func() bool { return httpOK(url) }); err != nil {
			return fmt.Errorf("nats-%d never became ready: %w; the end of its log:\n%s", i+1, err, logTail(h.nats[i].logs, 20))
		}
	}
	h.logf("NATS cluster up: %s (routes through proxies; credentials and TLS: %t)", strings.Join(h.natsURLs, ","), h.auth != nil)
	if h.auth != nil {
		if err := h.provision(ctx); err != nil {
			return err
		}
	}

	apiPort, err := freeport.Pick()
	if err != nil {
		return err
	}
	h.api = fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	common := func(id, role string) []string {
		return append([]string{"--nats", strings.Join(h.natsURLs, ","), "--replicas", "3", "--id", id}, h.credArgs(role)...)
	}
	for _, s := range []struct {
		name, role string
		args       []string
	}{
		{"store", natsauth.RoleStore, []string{"store"}},
		{"scheduler-a", natsauth.RoleScheduler, []string{"scheduler"}},
		{"scheduler-b", natsauth.RoleScheduler, []string{"scheduler"}},
		{"binder-a", natsauth.RoleBinder, []string{"binder"}},
		{"binder-b", natsauth.RoleBinder, []string{"binder"}},
		{"status", natsauth.RoleStatus, []string{"status"}},
		{"workloads-a", natsauth.RoleWorkloads, []string{"workloads"}},
		{"workloads-b", natsauth.RoleWorkloads, []string{"workloads"}},
		{"controllers-a", natsauth.RoleControllers, []string{"controllers"}},
		{"controllers-b", natsauth.RoleControllers, []string{"controllers"}},
		{"admission", natsauth.RoleAdmission, []string{"admission", "--listen", fmt.Sprintf("127.0.0.1:%d", apiPort), "--insecure-http"}},
	} {
		h.services = append(h.services, h.newProc(s.name, append(s.args, common(s.name, s.role)...)...))
	}
	for i, node := range agentNames {
		clock := filepath.Join(h.cfg.Dir, "clock-"+node)
		if err := os.WriteFile(clock, []byte("0s\n"), 0o644); err != nil {
			return err
		}
		h.clocks = append(h.clocks, clock)
		h.agents = append(h.agents, h.newProc("agent-"+node, append([]string{"agent", "--node", node,
			"--pod-cidr", fmt.Sprintf("10.42.%d.0/24", i+1), "--cpu", "4", "--memory", "8Gi", "--heartbeat", "2s",
			"--clock-offset-file", clock}, append(common("agent-"+node, natsauth.AgentRole(node)), h.realArgs(node)...)...)...))
	}
	for _, p := range append(append([]*proc(nil), h.services...), h.agents...) {
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, p := range h.all() {
		go p.supervise(superCtx, h.logf)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	if err := poll(ctx, 90*time.Second, func() bool {
		resp, err := client.Get(h.api + "/api/v1/nodes")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list struct{ Items []json.RawMessage }
		return json.NewDecoder(resp.Body).Decode(&list) == nil && len(list.Items) == members
	}); err != nil {
		return fmt.Errorf("the API never listed %d nodes: %w", members, err)
	}
	h.logf("deployment up: API on %s", h.api)
	return nil
}

// resumeAll makes sure every process runs: none stopped, none left dead.
func (h *harness) resumeAll() {
	for _, p := range h.all() {
		p.signal(syscall.SIGCONT)
		if err := p.restart(); err != nil {
			h.logf("restart %s: %v", p.name, err)
		}
	}
}

func (h *harness) shutdown() {
	var wg sync.WaitGroup
	for _, p := range append(append([]*proc(nil), h.services...), h.agents...) {
		wg.Go(func() { p.shutdown(10 * time.Second) })
	}
	wg.Wait()
	for _, p := range h.nats {
		wg.Go(func() { p.shutdown(10 * time.Second) })
	}
	wg.Wait()
	h.closeRealNode()
	if h.tmpfs != "" {
		if err := unmount(h.tmpfs); err != nil {
			h.logf("unmount %s: %v", h.tmpfs, err)
		}
	}
}

func (h *harness) crashes() int {
	n := 0
	for _, p := range h.all() {
		p.mu.Lock()
		n += p.exits
		p.mu.Unlock()
	}
	return n
}

func httpOK(url string) bool {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// poll calls cond until it holds, for at most d.
func poll(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// between is a random duration in [lo, hi).
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int63n(int64(hi-lo)))
}
