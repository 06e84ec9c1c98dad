package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/natsauth"
)

// simAgentRuntime is simAgent that also returns the node's simulated runtime, to look at its sandboxes.
func simAgentRuntime(t *testing.T, cl *up.Cluster, node, cidr string, hb time.Duration) (start func() (stop func()), rt *fake.Runtime) {
	t.Helper()
	rt, err := fake.New(fake.Config{PodCIDR: cidr})
	if err != nil {
		t.Fatal(err)
	}
	conn := natsConn(t, cl, natsauth.AgentRole(node), node+"-agent", nil)
	return func() func() {
		a, err := agent.New(agent.Config{Node: node, PodCIDR: cidr, HeartbeatInterval: hb}, conn, rt)
		if err != nil {
			t.Fatal(err)
		}
		return runAgent(t, a)
	}, rt
}

// failoverYAML is a Deployment of app=web whose pods prefer node lost and tolerate losing it for two
// seconds only.
const failoverYAML = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 8
  selector: {matchLabels: {app: web}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            preference: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [lost]}]}
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      containers: [{name: app, image: example.local/app:1, resources: {requests: {cpu: 10m}}}]
`

// podStates lists name -> node and Ready of the pods labelled app=<app>.
func podStates(k kube, app string) map[string][2]string {
	out := k.must("get", "pods", "-l", "app="+app, "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
	m := map[string][2]string{}
	for _, l := range strings.Fields(out) {
		f := strings.Split(l, "=")
		if len(f) == 3 {
			m[f[0]] = [2]string{f[1], f[2]}
		}
	}
	return m
}

// An agent stops heartbeating (its own NATS credential, as a separate node's agent): within the
// node-monitor grace plus the pods' tolerationSeconds its node is tainted, the Deployment's pods there
// are evicted and their replacements Ready on the other nodes, while the DaemonSet's pod stays on it and
// is not made elsewhere. The agent comes back: the node is untainted, the daemon pod Ready again, and the
// evicted pods' sandboxes are gone from its runtime. An evicted pod's audit timeline names the
// ReplicaSet controller that created it and the taint eviction that deleted it; audit verify passes.
func TestWorkloadFailover(t *testing.T) {
	needKubectl(t)
	hb := 300 * time.Millisecond
	cl, conn := startCluster(t, up.Config{Nodes: 3, StartDelay: 20 * time.Millisecond, HeartbeatInterval: hb,
		NodeMonitorGracePeriod: 2 * time.Second, NATSAuth: true, AgentCreds: []string{"lost"}})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	start, rt := simAgentRuntime(t, cl, "lost", "10.97.0.0/24", hb)
	stop := start()
	bustest.Eventually(t, 60*time.Second, func() bool {
		_, err := k.run("get", "node", "lost")
		return err == nil
	}, "node lost never registered")
	k.must("wait", "--for=condition=Ready", "node/lost", "node/node-1", "node/node-2", "node/node-3", "--timeout=60s")
	k.must("apply", "-f", writeFile(t, "web.yaml", failoverYAML+"---\n"+daemonSetYAML))
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	k.must("rollout", "status", "ds/logs", "--timeout=60s")

	var evicted []string
	for name, st := range podStates(k, "web") {
		if st[0] == "lost" {
			evicted = append(evicted, name)
		}
	}
	if len(evicted) == 0 {
		t.Fatalf("no pod of the Deployment on node lost: %v", podStates(k, "web"))
	}
	var daemon string
	for name, node := range podsOn(k, "logs") {
		if node == "lost" {
			daemon = name
		}
	}
	if daemon == "" {
		t.Fatalf("no daemon pod on node lost: %v", podsOn(k, "logs"))
	}

	killed := time.Now()
	stop()
	taints := func() string { return k.must("get", "node", "lost", "-o", "jsonpath={.spec.taints[*].key}") }
	bustest.Eventually(t, 60*time.Second, func() bool { return strings.Contains(taints(), "node.kubernetes.io/unreachable") },
		"node lost not tainted: %q", taints())
	tainted := time.Since(killed)
	// Until the replacements are Ready elsewhere, sample the daemon pods: the one on lost stays, none is added.
	bustest.Eventually(t, 60*time.Second, func() bool {
		if ds := podsOn(k, "logs"); len(ds) != 4 || ds[daemon] != "lost" {
			t.Fatalf("daemon pods while node lost is unreachable = %v, want 4 with %s on lost", ds, daemon)
		}
		web := podStates(k, "web")
		if len(web) != 8 {
			return false
		}
		for _, st := range web {
			if st[0] == "lost" || st[0] == "" || st[1] != "True" {
				return false
			}
		}
		return true
	}, "the Deployment's pods are not all Ready on live nodes: %v", podStates(k, "web"))
	recovered := time.Since(killed)
	k.must("wait", "--for=condition=Available", "deployment/web", "--timeout=30s")
	if out := k.must("get", "deploy", "web", "-o", "jsonpath={.status.readyReplicas}/{.status.availableReplicas}"); out != "8/8" {
		t.Errorf("deployment ready/available = %s, want 8/8", out)
	}
	reasons := func() string { return k.must("get", "events", "-o", "jsonpath={.items[*].reason}") }
	bustest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(reasons(), "TaintManagerEviction") },
		"no TaintManagerEviction event: %q", reasons())
	t.Logf("agent killed: node tainted after %v, %d pods evicted and replaced Ready after %v",
		tainted.Round(time.Millisecond), len(evicted), recovered.Round(time.Millisecond))

	t.Run("timeline of an evicted pod", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		incs, err := audit.Timeline(ctx, conn.JS, audit.TimelineOptions{Namespace: "default", Name: evicted[0]})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_ = audit.WriteTimeline(&b, incs)
		tl := b.String()
		t.Logf("\n%s", tl)
		for _, want := range []string{"replicaset-controller", "ReplicaSet/web-", "node-controller", "TaintManagerEviction"} {
			if !strings.Contains(tl, want) {
				t.Errorf("the timeline does not name %q", want)
			}
		}
	})

	start()
	bustest.Eventually(t, 60*time.Second, func() bool { return !strings.Contains(taints(), "node.kubernetes.io/") },
		"node lost still tainted: %q", taints())
	k.must("wait", "--for=condition=Ready", "pod/"+daemon, "--timeout=60s")
	bustest.Eventually(t, 30*time.Second, func() bool {
		for _, name := range evicted {
			if hasSandbox(t, rt, name) {
				return false
			}
		}
		return true
	}, "an evicted pod's sandbox is still on node lost")
	if ds := podsOn(k, "logs"); len(ds) != 4 || ds[daemon] != "lost" {
		t.Errorf("daemon pods after node lost came back = %v", ds)
	}

	t.Run("audit verify", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := audit.Verify(ctx, conn.JS, audit.VerifyOptions{})
		if err != nil {
			t.Fatalf("verify: %v: %v", err, res.Differences)
		}
		if res.Nodes != 4 {
			t.Errorf("verify compared %d pods and %d nodes", res.Pods, res.Nodes)
		}
		// The log also holds the workload objects' writes (who changed the Deployment), not Secrets'.
		counts := map[string]int{}
		err = audit.Scan(ctx, conn.JS, audit.ScanOptions{Filters: []string{bus.SubjKV(bus.BucketDeployments) + ">",
			bus.SubjKV(bus.BucketReplicaSets) + ">", bus.SubjKV(bus.BucketDaemonSets) + ">"}}, func(r *audit.Record) error {
			b, _, _ := r.Bucket()
			counts[b]++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if counts[bus.BucketDeployments] == 0 || counts[bus.BucketReplicaSets] == 0 || counts[bus.BucketDaemonSets] == 0 {
			t.Errorf("workload records in the audit log: %v", counts)
		}
	})
}

// kubectl drain of a node carrying pods of a 30-replica Deployment whose PodDisruptionBudget wants 29
// available evicts them one at a time: the other evictions are refused with 429 (in drain's output) and
// retried, the Deployment never has fewer than 29 Ready pods (every state of the pods bucket, watched),
// and the drain completes with the replacements Ready on the other nodes; a drained pod's audit
// timeline says it was deleted for an eviction.
func TestDrainThirtyReplicasBudget(t *testing.T) {
	needKubectl(t)
	cl, conn := startCluster(t, up.Config{Nodes: 5, StartDelay: 20 * time.Millisecond})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	pc := watchPods(t, conn, "web")
	dep := strings.Replace(deploymentYAML("web", "example.local/app:1", "30"), "    spec:\n", "    spec:\n      terminationGracePeriodSeconds: 1\n", 1)
	k.must("apply", "-f", writeFile(t, "web.yaml", dep+`---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 29
  selector: {matchLabels: {app: web}}
`))
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	k.must("wait", "--for=jsonpath={.status.disruptionsAllowed}=1", "pdb/web", "--timeout=30s")
	var onNode int
	var drained string
	for name, st := range podStates(k, "web") {
		if st[0] == "node-1" {
			onNode++
			drained = name
		}
	}
	if onNode < 2 {
		t.Fatalf("%d pods on node-1, want at least 2 to see the budget hold one back", onNode)
	}

	pc.arm(t)
	began := time.Now()
	out := k.must("drain", "node-1", "--timeout=80s")
	took := time.Since(began)
	if !strings.Contains(out, "Cannot evict pod as it would violate the pod's disruption budget") {
		t.Errorf("drain never waited for the budget:\n%s", out)
	}
	if n := strings.Count(out, " evicted"); n != onNode {
		t.Errorf("drain evicted %d pods, want %d:\n%s", n, onNode, out)
	}
	minReady, maxActive := pc.result()
	t.Logf("drain of %d pods took %v: fewest Ready %d, most pods %d", onNode, took.Round(time.Millisecond), minReady, maxActive)
	if minReady < 29 {
		t.Errorf("during the drain %d pods were Ready at the fewest, want >= 29", minReady)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	incs, err := audit.Timeline(ctx, conn.JS, audit.TimelineOptions{Namespace: "default", Name: drained})
	if err != nil {
		t.Fatal(err)
	}
	var tl strings.Builder
	_ = audit.WriteTimeline(&tl, incs)
	if !strings.Contains(tl.String(), "delete requested by user") || !strings.Contains(tl.String(), ": Eviction") {
		t.Errorf("the timeline of drained pod %s does not say it was evicted:\n%s", drained, tl.String())
	}
	k.must("wait", "--for=condition=Available", "deployment/web", "--timeout=30s")
	bustest.Eventually(t, 30*time.Second, func() bool {
		web := podStates(k, "web")
		if len(web) != 30 {
			return false
		}
		for _, st := range web {
			if st[0] == "node-1" || st[0] == "" || st[1] != "True" {
				return false
			}
		}
		return true
	}, "the Deployment's pods are not all Ready off node-1: %v", podStates(k, "web"))
}
