package e2e

// Resource usage and node conditions on a real node: kubectl top reads the agent's cgroup samples
// through metrics.k8s.io, kubectl get nodes -o wide shows the machine's address and containerd, and a
// threshold the machine cannot meet puts the node under pressure, taints it, and evicts its pod.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/nodestats"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// startMeasuringAgent runs the node's agent with a short usage interval and the given thresholds; stop
// ends it (the test's end does too).
func (n realNode) startMeasuringAgent(t *testing.T, natsURL, evictionHard string) (stop func()) {
	t.Helper()
	rt := n.runtime(t)
	conn := bustest.Conn(t, natsURL, "agent-"+n.name+"-"+evictionHard)
	a, err := agent.New(agent.Config{
		Node: n.name, PodCIDR: n.cidr, CPU: "4", Memory: "8Gi", MaxPods: 20,
		HeartbeatInterval: time.Second, BackoffBase: time.Second, BackoffMax: 5 * time.Second,
		UsageInterval: 2 * time.Second, EvictionHard: evictionHard,
	}, conn, rt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent %s: %v", n.name, err)
		}
		_ = rt.Close()
	}
	t.Cleanup(stop)
	return stop
}

// column returns the field under header in the row of out whose first field is name ("" if none).
func column(out, name, header string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return ""
	}
	idx := -1
	for i, h := range strings.Fields(lines[0]) {
		if h == header {
			idx = i
		}
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) > idx && idx >= 0 && f[0] == name {
			return f[idx]
		}
	}
	return ""
}

func TestTopAndNodePressure(t *testing.T) {
	needContainerd(t)
	reg := builtinRegistry(t)
	n := newRealNode(t)
	cl, conn := startCluster(t, up.Config{Nodes: 0})
	stop := n.startMeasuringAgent(t, cl.NATSURL, "none")
	k := kube{t: t, kubeconfig: cl.Kubeconfig}

	k.must("apply", "-f", writeFile(t, "busy.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: busy, labels: {app: busy}}
spec:
%s  terminationGracePeriodSeconds: 1
  containers:
  - name: spin
    image: %s/podbus/busybox:latest
    command: ["sh", "-c", "while :; do :; done"]
    resources: {requests: {cpu: 50m, memory: 8Mi}, limits: {cpu: 200m, memory: 32Mi}}
`, pinned(n.name), reg)))
	waitPod(t, conn, "busy", 60*time.Second, "Running", func(p *pb.Pod) bool { return p.GetStatus().GetPhase() == "Running" })

	// kubectl top pods: the busy loop shows CPU (its limit caps it near 200m).
	var top string
	bustest.Eventually(t, 30*time.Second, func() bool {
		top, _ = k.run("top", "pods", "-l", "app=busy")
		cpu := column(top, "busy", "CPU(cores)")
		return cpu != "" && cpu != "0m" && strings.HasSuffix(cpu, "m")
	}, "kubectl top pods shows busy's CPU")
	t.Logf("kubectl top pods:\n%s", top)
	if out := k.must("top", "pods", "--containers"); column(out, "busy", "NAME") != "spin" {
		t.Errorf("kubectl top pods --containers:\n%s", out)
	}
	bustest.Eventually(t, 30*time.Second, func() bool {
		top, _ = k.run("top", "nodes")
		cpu := column(top, n.name, "CPU(cores)")
		return cpu != "" && cpu != "<unknown>"
	}, "kubectl top nodes shows the node")
	t.Logf("kubectl top nodes:\n%s", top)

	// kubectl get nodes -o wide: the machine's address and containerd.
	wide := k.must("get", "nodes", "-o", "wide")
	t.Logf("kubectl get nodes -o wide:\n%s", wide)
	if ip, err := nodestats.InternalIP(); err == nil && ip != "" {
		if got := column(wide, n.name, "INTERNAL-IP"); got != ip {
			t.Errorf("INTERNAL-IP %q, want %q", got, ip)
		}
	}
	rt := n.runtime(t)
	version, err := rt.Version(context.Background())
	_ = rt.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(wide, version) || !strings.Contains(wide, nodestats.KernelVersion("/")) {
		t.Errorf("get nodes -o wide lacks %s or the kernel version:\n%s", version, wide)
	}

	// A memory threshold no machine meets: MemoryPressure, its taint, and the pod evicted.
	stop()
	n.startMeasuringAgent(t, cl.NATSURL, "memory.available<1Ei")
	evicted := waitPod(t, conn, "busy", 30*time.Second, "Evicted", func(p *pb.Pod) bool {
		return p.GetStatus().GetPhase() == "Failed" && p.GetStatus().GetReason() == agent.ReasonEvicted
	})
	if msg := evicted.GetStatus().GetMessage(); !strings.HasPrefix(msg, "The node was low on resource: memory.") {
		t.Errorf("eviction message %q", msg)
	}
	bustest.Eventually(t, 30*time.Second, func() bool {
		out, _ := k.run("get", "node", n.name, "-o", `jsonpath={.status.conditions[?(@.type=="MemoryPressure")].status} {.spec.taints[*].key}`)
		return strings.HasPrefix(out, "True ") && strings.Contains(out, "node.kubernetes.io/memory-pressure")
	}, "MemoryPressure True and the memory-pressure taint")
}

// kubectl top on simulated nodes, with the bus's permissions on: the pool of simulated nodes publishes
// estimated usage that the API may read, and view users may read it.
func TestTopSimulated(t *testing.T) {
	needKubectl(t)
	cl, _ := startCluster(t, up.Config{Nodes: 2, NATSAuth: true, UsageInterval: time.Second, StartDelay: time.Millisecond})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	var manifest strings.Builder
	for i := range 3 {
		fmt.Fprintf(&manifest, `---
apiVersion: v1
kind: Pod
metadata: {name: web-%d, labels: {app: web}}
spec:
  containers:
  - {name: web, image: "nginx:1.27", resources: {requests: {cpu: 200m, memory: 64Mi}}}
`, i)
	}
	k.must("apply", "-f", writeFile(t, "web.yaml", manifest.String()))
	var out string
	bustest.Eventually(t, 60*time.Second, func() bool {
		out, _ = k.run("top", "pods", "-l", "app=web", "--no-headers")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 {
			return false
		}
		for _, l := range lines {
			if f := strings.Fields(l); len(f) < 3 || f[1] == "0m" || f[2] == "0Mi" {
				return false
			}
		}
		return true
	}, "kubectl top pods shows the three replicas")
	t.Logf("kubectl top pods:\n%s", out)
	bustest.Eventually(t, 30*time.Second, func() bool {
		out, _ = k.run("top", "nodes", "--no-headers")
		return strings.Count(out, "node-") == 2 && !strings.Contains(out, "<unknown>")
	}, "kubectl top nodes shows both nodes")
	t.Logf("kubectl top nodes:\n%s", out)
}
