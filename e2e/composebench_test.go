//go:build compose

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/nodestats"
)

// composeBenchAgents simulated nodes of 250 pods each hold composeBenchPods with room to spare;
// TestComposeNodesBench runs composeNodesPerAgent nodes in each of them.
const (
	composeBenchAgents   = 10
	composeBenchPods     = 2000
	composeNodesPerAgent = 100
)

var throughputLine = regexp.MustCompile(`created→ready throughput (\d+) pods/s`)

// TestComposeThroughputBench is issue 17's target 7 as a user meets it (make compose-bench): the compose
// deployment (three NATS servers, streams and buckets at R3, every service in its own container) takes
// composeBenchPods pods through the API, sent by `podbus loadtest` from a container on the project's
// network, 64 requests in flight, with as many scheduler and binder replicas as PODBUS_COMPOSE_SCALE
// asks (one each by default). It prints figures, and asserts that every pod became Ready, each bound
// once, with no node over its allocatable.
func TestComposeThroughputBench(t *testing.T) {
	if os.Getenv("PODBUS_COMPOSE_BENCH") == "" {
		t.Skip("a benchmark: run with PODBUS_COMPOSE_BENCH=1 (make compose-bench)")
	}
	scale, extra := composeScale(t)
	c, _, _ := startCompose(t, composeBenchAgents)
	if scale != nil {
		c.mustDC(5*time.Minute, append([]string{"up", "-d", "--scale", fmt.Sprintf("agent=%d", composeBenchAgents)}, scale...)...)
		c.waitHealthy(composeServices+composeBenchAgents+extra, 3*time.Minute)
	}
	image := os.Getenv("PODBUS_IMAGE")
	if image == "" {
		image = "podbus:local"
	}
	// The idle cluster first: what it spends with no pod to run (heartbeats, Raft, health checks).
	idle := machineCPU(t, func() { time.Sleep(15 * time.Second) })
	t.Logf("FIGURE idle cluster: %.0f%% of one core (whole machine, %d cores)", idle.busy*100, idle.cores)

	rate, load := composeLoad(t, c, image)
	t.Logf("FIGURE compose R3, %d pods through the API: created→ready %s pods/s; machine %.0f%% busy, %.1f ms of CPU per pod (load generator included)",
		composeBenchPods, rate, load.busy*100/float64(load.cores), load.seconds*1000/composeBenchPods)
	c.logDecisions()
	// Whatever the replicas: each pod bound once, no node over its allocatable.
	c.checkPods(composeBenchPods)
	c.checkBus()
}

// composeScale reads PODBUS_COMPOSE_SCALE ("scheduler=3,binder=2"): the replicas of the scalable
// services for the throughput bench, as docker-compose arguments, and how many containers they add.
func composeScale(t *testing.T) (args []string, extra int) {
	t.Helper()
	v := os.Getenv("PODBUS_COMPOSE_SCALE")
	if v == "" {
		return nil, 0
	}
	for _, kv := range strings.Split(v, ",") {
		svc, n, ok := strings.Cut(strings.TrimSpace(kv), "=")
		count, err := strconv.Atoi(n)
		if !ok || err != nil || count < 1 || (svc != "scheduler" && svc != "binder") {
			t.Fatalf("PODBUS_COMPOSE_SCALE: %q is not scheduler=N or binder=N", kv)
		}
		args = append(args, "--scale", svc+"="+n)
		extra += count - 1
	}
	return args, extra
}

// decisionCounters are the counters of each scheduler and binder replica that say whether more
// replicas added work or conflicts: decisions made, decisions sent back because a binder refused them,
// and the binders' lost compare-and-sets.
var decisionCounters = []string{"scheduler.decisions", "scheduler.conflict_requeues", "binder.conflicts",
	"binder.cas_conflicts.alloc", "binder.cas_conflicts.pod", "binder.cas_conflicts.commit", "binder.stale_decisions"}

// logDecisions prints decisionCounters per replica, read from each container's /debug/vars.
func (c *composeEnv) logDecisions() {
	t := c.t
	t.Helper()
	for _, svc := range []string{"scheduler", "binder"} {
		for id := range c.containers(svc) {
			ip := c.addr(id)
			if ip == "" {
				continue
			}
			var vars struct {
				Podbus map[string]int64 `json:"podbus"`
			}
			if err := getJSON(http.DefaultClient, "http://"+ip+":8081/debug/vars", &vars); err != nil {
				t.Errorf("%s %.12s: %v", svc, id, err)
				continue
			}
			var parts []string
			for _, name := range decisionCounters {
				if strings.HasPrefix(name, svc+".") {
					parts = append(parts, fmt.Sprintf("%s %d", strings.TrimPrefix(name, svc+"."), vars.Podbus[name]))
				}
			}
			t.Logf("FIGURE %s %.12s: %s", svc, id, strings.Join(parts, ", "))
		}
	}
}

// TestComposeNodesBench is issue 17's target 1 on the compose deployment (make compose-bench): 1,000
// simulated nodes, composeNodesPerAgent to each of composeBenchAgents agent containers, all Ready and
// staying Ready, with consumers that grow with the agent processes rather than the nodes; then
// composeBenchPods pods through the API onto them. It prints figures and asserts those conditions.
func TestComposeNodesBench(t *testing.T) {
	if os.Getenv("PODBUS_COMPOSE_BENCH") == "" {
		t.Skip("a benchmark: run with PODBUS_COMPOSE_BENCH=1 (make compose-bench)")
	}
	const nodes = composeBenchAgents * composeNodesPerAgent
	t.Setenv("PODBUS_AGENT_NODES", strconv.Itoa(composeNodesPerAgent)) // read by deploy/docker-compose.yml
	start := time.Now()
	c, healthy, _ := startCompose(t, composeBenchAgents)
	c.waitNodes(nodes, 3*time.Minute)
	t.Logf("FIGURE compose R3: up -> %d nodes Ready in %s (containers healthy after %s)", nodes,
		time.Since(start).Round(100*time.Millisecond), healthy.Round(100*time.Millisecond))
	// The containers' health checks gate the wait above; the nodes' own records say how long registering
	// took (their times have a resolution of a second).
	var list corev1.NodeList
	if err := c.getJSON("/api/v1/nodes", &list); err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	for _, n := range list.Items {
		if created := n.CreationTimestamp.Time; first.IsZero() || created.Before(first) {
			first = created
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && cond.LastTransitionTime.After(last) {
				last = cond.LastTransitionTime.Time
			}
		}
	}
	t.Logf("FIGURE compose R3: the first node registered %s after up began, the last was Ready %s after it",
		first.Sub(start).Round(time.Second), last.Sub(first).Round(time.Second))

	total := 0
	for _, info := range c.streamInfos() {
		total += info.State.Consumers
		// Each agent process holds one durable on PODS, whatever the nodes it runs: a consumer per node
		// would be 1,000 of them.
		if name := info.Config.Name; name == bus.StreamPods {
			t.Logf("FIGURE compose R3, %d nodes in %d agent processes: %d consumers on %s", nodes, composeBenchAgents, info.State.Consumers, name)
			if info.State.Consumers >= nodes/10 {
				t.Errorf("%d consumers on %s: they grow with the nodes", info.State.Consumers, name)
			}
		}
	}
	t.Logf("FIGURE compose R3, %d nodes: %d consumers over every stream and bucket", nodes, total)

	// Idle with the nodes' heartbeats, and every node still Ready after it.
	idle := machineCPU(t, func() { time.Sleep(15 * time.Second) })
	t.Logf("FIGURE idle cluster with %d nodes: %.0f%% of one core (whole machine, %d cores)", nodes, idle.busy*100, idle.cores)
	c.waitNodes(nodes, 10*time.Second)

	image := os.Getenv("PODBUS_IMAGE")
	if image == "" {
		image = "podbus:local"
	}
	rate, load := composeLoad(t, c, image)
	t.Logf("FIGURE compose R3, %d nodes, %d pods through the API: created→ready %s pods/s; machine %.0f%% busy, %.1f ms of CPU per pod (load generator included)",
		nodes, composeBenchPods, rate, load.busy*100/float64(load.cores), load.seconds*1000/composeBenchPods)
}

// composeLoad sends composeBenchPods pods through the API from a loadtest container on the project's
// network, 64 requests in flight, and fails unless every one became Ready.
func composeLoad(t *testing.T, c *composeEnv, image string) (rate string, load cpuUse) {
	t.Helper()
	// The load generator's own default pod unless PODBUS_COMPOSE_POD ("cpu,memory") says otherwise.
	// Pods far smaller than a node (1m, 1Mi on these 64-CPU nodes) are packed one node at a time by
	// the default profile's balanced-allocation score, as kube-scheduler's: see docs/perf.md.
	var pod []string
	if v := os.Getenv("PODBUS_COMPOSE_POD"); v != "" {
		cpu, mem, ok := strings.Cut(v, ",")
		if !ok {
			t.Fatalf("PODBUS_COMPOSE_POD=%q: want cpu,memory (100m,64Mi)", v)
		}
		pod = []string{"--cpu", cpu, "--memory", mem}
	}
	args := append([]string{"run", "--rm", "--network", composeProject + "_default",
		"-v", composeProject + "_creds-admin:/creds:ro", "-v", c.kube.kubeconfig + ":/kube/kubeconfig:ro", image,
		"loadtest", "--api", "https://admission:6443", "--kubeconfig", "/kube/kubeconfig",
		"--nats", "nats://n1:4222,nats://n2:4222,nats://n3:4222", "--nats-creds", "/creds/admin.creds",
		"--nats-ca", "/creds/ca.crt", "--pods", strconv.Itoa(composeBenchPods), "--quiet"}, pod...)
	var out string
	load = machineCPU(t, func() { out = c.must(10*time.Minute, "docker", args...) })
	t.Logf("loadtest:\n%s", out)
	m := throughputLine.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, fmt.Sprintf("%d ready, 0 unschedulable", composeBenchPods)) {
		t.Fatalf("not every pod became Ready:\n%s", out)
	}
	return m[1], load
}

// cpuUse is what the whole machine spent while a function ran, from /proc/stat.
type cpuUse struct {
	busy    float64 // cores busy on average
	seconds float64 // CPU seconds spent
	cores   int
}

func machineCPU(t *testing.T, f func()) cpuUse {
	t.Helper()
	b0, err := nodestats.ReadCPUNanos("/")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f()
	wall := time.Since(start).Seconds()
	b1, err := nodestats.ReadCPUNanos("/")
	if err != nil {
		t.Fatal(err)
	}
	spent := float64(b1-b0) / 1e9
	return cpuUse{busy: spent / wall, seconds: spent, cores: runtime.NumCPU()}
}
