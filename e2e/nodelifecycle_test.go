package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/fake"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/natsauth"
)

// lostPod runs on node "lost" and tolerates its unreachable taint for seconds ("" : forever).
func lostPod(name, seconds string) string {
	tol := "{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute}"
	if seconds != "" {
		tol = "{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: " + seconds + "}"
	}
	return `apiVersion: v1
kind: Pod
metadata: {name: ` + name + `}
spec:
  nodeSelector: {kubernetes.io/hostname: lost}
  tolerations: [` + tol + `]
  containers: [{name: app, image: example.local/app:1, resources: {requests: {cpu: 10m}}}]
`
}

// An agent stops heartbeating: its node is tainted unreachable, the pod tolerating it for a second is
// evicted (TaintManagerEviction) and the one tolerating it forever stays. The agent comes back: the
// taint goes and the evicted pod's sandbox is removed from its runtime. With NATS authorization, so the
// controller's role is shown to suffice.
func TestNodeLifecycleEvictsAndUntaints(t *testing.T) {
	needKubectl(t)
	hb := 300 * time.Millisecond
	cl, _ := startCluster(t, up.Config{Nodes: 1, StartDelay: 20 * time.Millisecond, HeartbeatInterval: hb,
		NodeMonitorGracePeriod: 2 * time.Second, NATSAuth: true, AgentCreds: []string{"lost"}})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	rt, err := fake.New(fake.Config{PodCIDR: "10.99.0.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	conn := natsConn(t, cl, natsauth.AgentRole("lost"), "lost-agent", nil)
	startAgent := func() (stop func()) {
		a, err := agent.New(agent.Config{Node: "lost", PodCIDR: "10.99.0.0/24", HeartbeatInterval: hb}, conn, rt)
		if err != nil {
			t.Fatal(err)
		}
		return runAgent(t, a)
	}
	stop := startAgent()
	bustest.Eventually(t, 60*time.Second, func() bool {
		_, err := k.run("get", "node", "lost")
		return err == nil
	}, "node lost never registered")
	k.must("wait", "--for=condition=Ready", "node/lost", "--timeout=60s")
	k.must("apply", "-f", writeFile(t, "brief.yaml", lostPod("brief", "1")))
	k.must("apply", "-f", writeFile(t, "stay.yaml", lostPod("stay", "")))
	k.must("wait", "--for=condition=Ready", "pod/brief", "pod/stay", "--timeout=60s")

	stop()
	taints := func() string { return k.must("get", "node", "lost", "-o", "jsonpath={.spec.taints[*].key}") }
	bustest.Eventually(t, 60*time.Second, func() bool { return strings.Contains(taints(), "node.kubernetes.io/unreachable") },
		"node lost not tainted: %q", taints())
	k.must("wait", "--for=delete", "pod/brief", "--timeout=60s")
	reasons := func() string { return k.must("get", "events", "-o", "jsonpath={.items[*].reason}") }
	bustest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(reasons(), "TaintManagerEviction") },
		"no TaintManagerEviction event: %q", reasons())
	k.must("get", "pod", "stay")
	if !hasSandbox(t, rt, "brief") {
		t.Fatal("the stopped agent's runtime lost the evicted pod's sandbox before coming back")
	}

	startAgent()
	bustest.Eventually(t, 60*time.Second, func() bool { return !strings.Contains(taints(), "node.kubernetes.io/") },
		"node lost still tainted: %q", taints())
	bustest.Eventually(t, 30*time.Second, func() bool { return !hasSandbox(t, rt, "brief") },
		"the evicted pod's sandbox is still on node lost")
	k.must("wait", "--for=condition=Ready", "pod/stay", "--timeout=60s")
}

func hasSandbox(t *testing.T, rt *fake.Runtime, pod string) bool {
	t.Helper()
	sbs, err := rt.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.Name == pod {
			return true
		}
	}
	return false
}
