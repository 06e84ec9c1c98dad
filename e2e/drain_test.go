package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/cluster/up"
)

// kubectl drain of a node whose pods a PodDisruptionBudget covers (maxUnavailable 1) evicts them one at
// a time: the evictions kubectl sends at once are refused with 429 but one, and retried. A DaemonSet's
// pod on the node stays (--ignore-daemonsets). Each pod takes a few seconds to stop (a preStop sleep),
// so the budget stays spent while the other evictions arrive, unless the API takes longer than that.
func TestDrainHonoursDisruptionBudget(t *testing.T) {
	needKubectl(t)
	cl, _ := startCluster(t, up.Config{Nodes: 2, StartDelay: 20 * time.Millisecond})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	var objs []string
	for i := range 3 {
		objs = append(objs, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web-%d, labels: {app: web}}
spec:
  nodeSelector: {kubernetes.io/hostname: node-1}
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: example.local/web:1
    resources: {requests: {cpu: 10m}}
    lifecycle: {preStop: {sleep: {seconds: 3}}}
`, i))
	}
	objs = append(objs, `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
`, daemonSetYAML)
	k.must("apply", "-f", writeFile(t, "web.yaml", strings.Join(objs, "---\n")))
	k.must("wait", "--for=condition=Ready", "pod/web-0", "pod/web-1", "pod/web-2", "--timeout=60s")
	k.must("rollout", "status", "ds/logs", "--timeout=60s")
	k.must("wait", "--for=jsonpath={.status.disruptionsAllowed}=1", "pdb/web", "--timeout=30s")
	if table := k.must("get", "pdb", "web"); !strings.Contains(table, "ALLOWED DISRUPTIONS") {
		t.Errorf("kubectl get pdb:\n%s", table)
	}

	out := k.must("drain", "node-1", "--ignore-daemonsets", "--force", "--timeout=80s")
	if !strings.Contains(out, "Cannot evict pod as it would violate the pod's disruption budget") {
		t.Errorf("drain never waited for the budget:\n%s", out)
	}
	for i := range 3 {
		if !strings.Contains(out, fmt.Sprintf("pod/web-%d evicted", i)) {
			t.Errorf("web-%d not evicted:\n%s", i, out)
		}
	}
	if left := k.must("get", "pods", "-l", "app=web", "-o", "name"); strings.TrimSpace(left) != "" {
		t.Errorf("pods left after the drain: %s", left)
	}
	if got := podsOn(k, "logs"); len(got) != 2 {
		t.Errorf("daemon pods after the drain = %v, want one on each node", got)
	}
}
