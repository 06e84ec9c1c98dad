package e2e

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
)

// agentRunner returns start, which runs the node's agent on a connection and runtime of its own until
// the stop it returns is called, or the test ends. Stopping leaves the containers running, as a kubelet
// that dies does; the next start re-adopts them from the same containerd namespace and state dir.
func (n realNode) agentRunner(t *testing.T, natsURL string, hb time.Duration) (start func() (stop func())) {
	t.Helper()
	logNodeOnFailure(t, bustest.Conn(t, natsURL, "node-log-"+n.name), n.name)
	runs := 0
	return func() func() {
		runs++
		rt := n.runtime(t)
		conn := bustest.Conn(t, natsURL, fmt.Sprintf("agent-%s-%d", n.name, runs))
		a, err := agent.New(agent.Config{
			Node: n.name, PodCIDR: n.cidr, CPU: "4", Memory: "8Gi", MaxPods: 20,
			HeartbeatInterval: hb, BackoffBase: time.Second, BackoffMax: 5 * time.Second,
			EvictionHard: noEviction,
		}, conn, rt)
		if err != nil {
			t.Fatal(err)
		}
		return runAgent(t, a, conn.Close, func() { _ = rt.Close() })
	}
}

// podUIDs lists name -> uid of the pods labelled app=<app>.
func podUIDs(k kube, app string) map[string]string { return podField(k, app, "{.metadata.uid}") }

// failoverContainerdYAML is failoverYAML's Deployment, four replicas preferring the real node, on real
// images; and a DaemonSet of the same image. %[1]s is the real node, %[2]s the busybox image.
const failoverContainerdYAML = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%[1]s]}]}
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      containers:
      - name: app
        image: %[2]s
        command: ["sleep", "3600"]
        resources: {requests: {cpu: 10m, memory: 8Mi}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: logs}
spec:
  selector: {matchLabels: {app: logs}}
  template:
    metadata: {labels: {app: logs}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: %[2]s
        command: ["sleep", "3600"]
        resources: {requests: {cpu: 10m, memory: 8Mi}}
`

// TestWorkloadFailover with the failing node on the real containerd runtime: its agent stops, its
// containers keep running (as when a kubelet dies), the node is tainted, the Deployment's pods there are
// evicted and replaced Ready on the simulated nodes. The agent comes back on the same containerd
// namespace and state: the node is untainted, the daemon pod Ready again with its container still
// running, and no container, task, sandbox record or netns of an evicted pod is left on the node.
func TestWorkloadFailoverContainerd(t *testing.T) {
	needContainerd(t)
	reg := builtinRegistry(t)
	n := newRealNode(t)
	hb := 300 * time.Millisecond
	cl, _ := startCluster(t, up.Config{Nodes: 2, StartDelay: 20 * time.Millisecond, HeartbeatInterval: hb,
		NodeMonitorGracePeriod: 4 * time.Second})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	start := n.agentRunner(t, cl.NATSURL, hb)
	stop := start()
	bustest.Eventually(t, 30*time.Second, func() bool {
		_, err := k.run("get", "node", n.name)
		return err == nil
	}, "node %s never registered", n.name)
	k.must("wait", "--for=condition=Ready", "node/"+n.name, "node/node-1", "node/node-2", "--timeout=60s")
	k.must("apply", "-f", writeFile(t, "web.yaml", fmt.Sprintf(failoverContainerdYAML, n.name, reg+"/podbus/busybox:latest")))
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	k.must("rollout", "status", "ds/logs", "--timeout=60s")

	webUIDs, logUIDs := podUIDs(k, "web"), podUIDs(k, "logs")
	evicted := map[string]string{} // uid -> name
	for name, st := range podStates(k, "web") {
		if st[0] == n.name {
			evicted[webUIDs[name]] = name
		}
	}
	if len(evicted) == 0 {
		t.Fatalf("no pod of the Deployment on %s: %v", n.name, podStates(k, "web"))
	}
	var daemon string
	for name, node := range podsOn(k, "logs") {
		if node == n.name {
			daemon = name
		}
	}
	if daemon == "" {
		t.Fatalf("no daemon pod on %s: %v", n.name, podsOn(k, "logs"))
	}
	daemonUID := logUIDs[daemon]

	rt := n.runtime(t)
	defer rt.Close()
	killed := time.Now()
	stop()
	taints := func() string { return k.must("get", "node", n.name, "-o", "jsonpath={.spec.taints[*].key}") }
	bustest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(taints(), "node.kubernetes.io/unreachable") },
		"node %s not tainted: %q", n.name, taints())
	tainted := time.Since(killed)
	bustest.Eventually(t, 60*time.Second, func() bool {
		web := podStates(k, "web")
		if len(web) != 4 {
			return false
		}
		for _, st := range web {
			if st[0] == n.name || st[0] == "" || st[1] != "True" {
				return false
			}
		}
		return true
	}, "the Deployment's pods are not all Ready on the simulated nodes: %v", podStates(k, "web"))
	recovered := time.Since(killed)
	if ds := podsOn(k, "logs"); len(ds) != 3 || ds[daemon] != n.name {
		t.Errorf("daemon pods while %s is unreachable = %v, want 3 with %s on it", n.name, ds, daemon)
	}
	// The evicted pods' containers still run: only the returning agent can stop them.
	running, _ := tasks(t, rt.Client(), n.ns)
	for uid, name := range evicted {
		if running[uid] != 1 {
			t.Errorf("evicted pod %s has %d running containers while the agent is away, want 1", name, running[uid])
		}
	}
	if running[daemonUID] != 1 {
		t.Errorf("daemon pod %s has %d running containers while the agent is away, want 1", daemon, running[daemonUID])
	}
	recs, strays := sandboxRecords(t, n)
	checkStrays(t, strays)
	t.Logf("agent stopped: node tainted after %v, %d pods evicted and replaced Ready after %v",
		tainted.Round(time.Millisecond), len(evicted), recovered.Round(time.Millisecond))

	start()
	back := time.Now()
	bustest.Eventually(t, 30*time.Second, func() bool { return !strings.Contains(taints(), "node.kubernetes.io/") },
		"node %s still tainted: %q", n.name, taints())
	untainted := time.Since(back)
	k.must("wait", "--for=condition=Ready", "pod/"+daemon, "--timeout=60s")
	var containers map[string]int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		running, containers = tasks(t, rt.Client(), n.ns)
		cleared := running[daemonUID] == 1
		for uid := range evicted {
			cleared = cleared && containers[uid] == 0
		}
		if cleared {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("evicted pods' containers still on %s, or the daemon pod's not running: running %v, containers %v (evicted %v, daemon %s)",
				n.name, running, containers, evicted, daemonUID)
		}
	}
	t.Logf("agent back: node untainted after %v, evicted pods' containers removed after %v",
		untainted.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	for uid, c := range containers {
		if uid != daemonUID {
			t.Errorf("%d container(s) of pod %s left on %s, which only runs the daemon pod %s", c, uid, n.name, daemon)
		}
	}
	if containers[daemonUID] != 1 {
		t.Errorf("daemon pod %s has %d containers, want 1 (the one that ran on while the agent was away)", daemon, containers[daemonUID])
	}
	after, strays := sandboxRecords(t, n)
	checkStrays(t, strays)
	for uid, name := range evicted {
		if _, ok := after[uid]; ok {
			t.Errorf("sandbox record of evicted pod %s is still there", name)
		}
		if netns := recs[uid]; netns != "" {
			if _, err := os.Stat(netns); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("netns %s of evicted pod %s: %v, want it gone", netns, name, err)
			}
		}
	}
	if _, ok := after[daemonUID]; !ok {
		t.Errorf("the daemon pod's sandbox record is gone")
	}
	if ds := podsOn(k, "logs"); len(ds) != 3 || ds[daemon] != n.name {
		t.Errorf("daemon pods after %s came back = %v", n.name, ds)
	}
	// Evicted pods are out of the API by uid (a replacement may reuse an evicted pod's name).
	for uid, name := range podUIDs(k, "web") {
		if _, ok := evicted[uid]; ok {
			t.Errorf("evicted pod %s (uid %s) still in the API after its node came back", name, uid)
		}
	}
}
