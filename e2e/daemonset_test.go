package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/services/admission"
	"github.com/podbus/podbus/services/controllers"
)

const daemonSetYAML = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: logs}
spec:
  selector: {matchLabels: {app: logs}}
  template:
    metadata: {labels: {app: logs}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: app, image: example.local/logs:1, resources: {requests: {cpu: 10m}}}]
`

// simAgent runs a simulated node's agent under its own credential; the returned stop may be called
// more than once, and is called at cleanup.
func simAgent(t *testing.T, cl *up.Cluster, node, cidr string, hb time.Duration) (start func() (stop func())) {
	t.Helper()
	start, _ = simAgentRuntime(t, cl, node, cidr, hb)
	return start
}

// podsOn lists name -> node of the pods labelled app=<app>.
func podsOn(k kube, app string) map[string]string { return podField(k, app, "{.spec.nodeName}") }

// podField lists name -> the value of a jsonpath field of each pod labelled app=<app>.
func podField(k kube, app, field string) map[string]string {
	out := k.must("get", "pods", "-l", "app="+app, "-o", `jsonpath={range .items[*]}{.metadata.name}=`+field+`{"\n"}{end}`)
	m := map[string]string{}
	for _, l := range strings.Fields(out) {
		name, v, _ := strings.Cut(l, "=")
		m[name] = v
	}
	return m
}

// A DaemonSet runs one pod per node, one more when a node joins; the pod of a node whose agent stops
// stays there (it tolerates the unreachable taint) and is not made elsewhere, and is Ready again when
// the agent comes back; a rolling update replaces every pod; deleting the DaemonSet deletes its pods.
// Three controller replicas, with NATS authorization, so the controllers' role is shown to suffice.
func TestDaemonSetFollowsNodes(t *testing.T) {
	needKubectl(t)
	hb := 300 * time.Millisecond
	cl, _ := startCluster(t, up.Config{Nodes: 2, StartDelay: 20 * time.Millisecond, HeartbeatInterval: hb,
		NodeMonitorGracePeriod: 2 * time.Second, NATSAuth: true, AgentCreds: []string{"late"}})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	// Two more controller replicas besides up's: still one pod per node.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, id := range []string{"controllers-1", "controllers-2"} {
		s, err := controllers.New(controllers.Config{ID: id, Kinds: admission.KindBuckets()}, natsConn(t, cl, natsauth.RoleControllers, id, nil))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}()
	}
	// Registered after the replicas' connections, so it runs before they close: a replica stopped
	// by its context returns nil, one whose connection went first would not.
	t.Cleanup(func() { cancel(); wg.Wait() })
	k.must("wait", "--for=condition=Ready", "node/node-1", "node/node-2", "--timeout=60s")
	k.must("apply", "-f", writeFile(t, "ds.yaml", daemonSetYAML))
	k.must("rollout", "status", "ds/logs", "--timeout=60s")
	if got := podsOn(k, "logs"); len(got) != 2 {
		t.Fatalf("daemon pods = %v, want one on each of 2 nodes", got)
	}
	table := k.must("get", "ds", "logs")
	if !strings.Contains(table, "NODE SELECTOR") || !strings.Contains(strings.Fields(strings.Split(table, "\n")[1])[1], "2") {
		t.Errorf("kubectl get ds:\n%s", table)
	}

	// A node joins.
	start := simAgent(t, cl, "late", "10.98.0.0/24", hb)
	stop := start()
	onLate := func() string {
		for name, node := range podsOn(k, "logs") {
			if node == "late" {
				return name
			}
		}
		return ""
	}
	bustest.Eventually(t, 60*time.Second, func() bool { return onLate() != "" }, "no daemon pod on the joining node: %v", podsOn(k, "logs"))
	pod := onLate()
	k.must("wait", "--for=condition=Ready", "pod/"+pod, "--timeout=60s")

	// Its agent stops: the node is tainted, the pod stays and none is made elsewhere.
	stop()
	taints := func() string { return k.must("get", "node", "late", "-o", "jsonpath={.spec.taints[*].key}") }
	bustest.Eventually(t, 60*time.Second, func() bool { return strings.Contains(taints(), "node.kubernetes.io/unreachable") },
		"node late not tainted: %q", taints())
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		got := podsOn(k, "logs")
		if len(got) != 3 || got[pod] != "late" {
			t.Fatalf("daemon pods while node late is unreachable = %v, want 3 with %s on late", got, pod)
		}
		time.Sleep(500 * time.Millisecond) // sampling, not waiting
	}

	// It comes back: untainted, the same pod Ready again.
	start()
	bustest.Eventually(t, 60*time.Second, func() bool { return !strings.Contains(taints(), "node.kubernetes.io/") },
		"node late still tainted: %q", taints())
	k.must("wait", "--for=condition=Ready", "pod/"+pod, "--timeout=60s")

	// A rolling update replaces every pod, one node at a time.
	k.must("set", "image", "ds/logs", "app=example.local/logs:2")
	k.must("rollout", "status", "ds/logs", "--timeout=80s")
	images := k.must("get", "pods", "-l", "app=logs", "-o", "jsonpath={.items[*].spec.containers[0].image}")
	if strings.Count(images, "example.local/logs:2") != 3 || strings.Contains(images, "logs:1") {
		t.Fatalf("images after the roll: %q", images)
	}
	reasons := k.must("get", "events", "--field-selector", "involvedObject.kind=DaemonSet", "-o", "jsonpath={.items[*].reason}")
	if !strings.Contains(reasons, "SuccessfulCreate") || !strings.Contains(reasons, "SuccessfulDelete") {
		t.Errorf("DaemonSet events: %q", reasons)
	}

	// Deleting the DaemonSet deletes its pods (the garbage collector).
	k.must("delete", "ds", "logs")
	bustest.Eventually(t, 60*time.Second, func() bool { return len(podsOn(k, "logs")) == 0 }, "daemon pods left: %v", podsOn(k, "logs"))
}
