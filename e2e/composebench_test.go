//go:build compose

package e2e

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/nodestats"
)

// composeBenchAgents simulated nodes of 250 pods each hold composeBenchPods with room to spare.
const (
	composeBenchAgents = 10
	composeBenchPods   = 2000
)

var throughputLine = regexp.MustCompile(`created→ready throughput (\d+) pods/s`)

// TestComposeThroughputBench is issue 17's target 7 as a user meets it (make compose-bench): the compose
// deployment (three NATS servers, streams and buckets at R3, every service in its own container) takes
// composeBenchPods pods through the API, sent by `podbus loadtest` from a container on the project's
// network, 64 requests in flight. It prints figures and asserts only that every pod became Ready.
func TestComposeThroughputBench(t *testing.T) {
	if os.Getenv("PODBUS_COMPOSE_BENCH") == "" {
		t.Skip("a benchmark: run with PODBUS_COMPOSE_BENCH=1 (make compose-bench)")
	}
	c, _, _ := startCompose(t, composeBenchAgents)
	image := os.Getenv("PODBUS_IMAGE")
	if image == "" {
		image = "podbus:local"
	}
	// The idle cluster first: what it spends with no pod to run (heartbeats, Raft, health checks).
	idle := machineCPU(t, func() { time.Sleep(15 * time.Second) })
	t.Logf("FIGURE idle cluster: %.0f%% of one core (whole machine, %d cores)", idle.busy*100, idle.cores)

	var out string
	load := machineCPU(t, func() {
		out = c.must(10*time.Minute, "docker", "run", "--rm", "--network", composeProject+"_default",
			"-v", composeProject+"_creds-admin:/creds:ro", "-v", c.kube.kubeconfig+":/kube/kubeconfig:ro", image,
			"loadtest", "--api", "https://admission:6443", "--kubeconfig", "/kube/kubeconfig",
			"--nats", "nats://n1:4222,nats://n2:4222,nats://n3:4222", "--nats-creds", "/creds/admin.creds",
			"--nats-ca", "/creds/ca.crt", "--pods", strconv.Itoa(composeBenchPods), "--cpu", "1m", "--memory", "1Mi", "--quiet")
	})
	t.Logf("loadtest:\n%s", out)
	m := throughputLine.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, fmt.Sprintf("%d ready, 0 unschedulable", composeBenchPods)) {
		t.Fatalf("not every pod became Ready:\n%s", out)
	}
	t.Logf("FIGURE compose R3, %d pods through the API: created→ready %s pods/s; machine %.0f%% busy, %.1f ms of CPU per pod (load generator included)",
		composeBenchPods, m[1], load.busy*100/float64(load.cores), load.seconds*1000/composeBenchPods)
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
