package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/cluster/nodepool"
	"github.com/podbus/podbus/cluster/up"
)

const pinnedPod = `apiVersion: v1
kind: Pod
metadata:
  name: NAME
  labels: {app: drain}
spec:
  NODESELECTOR
  containers:
  - name: app
    image: example.local/app:1
    resources:
      requests: {cpu: 100m, memory: 64Mi}
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  volumes: [{name: scratch, emptyDir: {}}]
`

func podYAML(name, nodeSelector string) string {
	sel := ""
	if nodeSelector != "" {
		sel = "nodeSelector: {" + nodeSelector + "}"
	}
	return strings.NewReplacer("NAME", name, "NODESELECTOR", sel).Replace(pinnedPod)
}

// kwokNodeYAML registers a node without an agent, as kwok users do.
const kwokNodeYAML = `apiVersion: v1
kind: Node
metadata:
  name: kw-1
  labels: {pool: kwok, kubernetes.io/hostname: kw-1}
spec:
  taints: [{key: kwok, value: "true", effect: NoSchedule}]
status:
  capacity: {cpu: "4", memory: 8Gi, pods: "10"}
  allocatable: {cpu: "4", memory: 8Gi, pods: "10"}
  conditions: [{type: Ready, status: "True", reason: KubeletReady, message: fake}]
`

// The real kubectl shapes nodes: label, taint, cordon/uncordon, drain, apply of a node, describe.
func TestKubectlNodes(t *testing.T) {
	needKubectl(t)
	cl, _ := startCluster(t, up.Config{Nodes: 2, StartDelay: 20 * time.Millisecond})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	nodeOf := func(pod string) string {
		t.Helper()
		k.must("wait", "--for=condition=PodScheduled", "pod/"+pod, "--timeout=60s")
		return k.must("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}")
	}

	// label
	if out := k.must("label", "node", "node-1", "disktype=ssd"); !strings.Contains(out, "node/node-1 labeled") {
		t.Errorf("label: %s", out)
	}
	if out := k.must("get", "nodes", "--show-labels"); !strings.Contains(out, "disktype=ssd") || !strings.Contains(out, "kubernetes.io/arch=") {
		t.Errorf("get nodes --show-labels:\n%s", out)
	}
	if out := k.must("get", "nodes", "-l", "disktype=ssd", "-o", "name"); strings.TrimSpace(out) != "node/node-1" {
		t.Errorf("label selector: %q", out)
	}
	if out, err := k.run("label", "node", "node-1", "bad=not ok"); err == nil || !strings.Contains(out, "Invalid") && !strings.Contains(out, "invalid") {
		t.Errorf("invalid label accepted: %v %s", err, out)
	}

	// taint: a NoSchedule taint keeps new pods away, its removal lets them back.
	for _, effect := range []string{"NoSchedule", "PreferNoSchedule", "NoExecute"} {
		if out := k.must("taint", "node", "node-2", "team=blue:"+effect); !strings.Contains(out, "node/node-2 tainted") {
			t.Errorf("taint %s: %s", effect, out)
		}
	}
	desc := k.must("describe", "node", "node-2")
	for _, want := range []string{"team=blue:NoSchedule", "team=blue:PreferNoSchedule", "team=blue:NoExecute", "Unschedulable:      false"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe node lacks %q:\n%s", want, desc)
		}
	}
	if out, err := k.run("taint", "node", "node-2", "x=y:Sometimes"); err == nil {
		t.Errorf("invalid effect accepted: %s", out)
	}
	k.must("apply", "-f", writeFile(t, "a.yaml", podYAML("a", "")))
	if n := nodeOf("a"); n != "node-1" {
		t.Errorf("pod a on %q, want node-1 (node-2 is tainted)", n)
	}
	for _, effect := range []string{"NoSchedule", "PreferNoSchedule", "NoExecute"} {
		if out := k.must("taint", "node", "node-2", "team=blue:"+effect+"-"); !strings.Contains(out, "untainted") {
			t.Errorf("untaint: %s", out)
		}
	}

	// cordon: the next pod avoids node-1; uncordon.
	if out := k.must("cordon", "node-1"); !strings.Contains(out, "cordoned") {
		t.Errorf("cordon: %s", out)
	}
	if out := k.must("get", "node", "node-1"); !strings.Contains(out, "SchedulingDisabled") {
		t.Errorf("cordoned node:\n%s", out)
	}
	k.must("apply", "-f", writeFile(t, "b.yaml", podYAML("b", "")))
	if n := nodeOf("b"); n != "node-2" {
		t.Errorf("pod b on %q, want node-2 (node-1 is cordoned)", n)
	}
	if out := k.must("uncordon", "node-1"); !strings.Contains(out, "uncordoned") {
		t.Errorf("uncordon: %s", out)
	}

	// drain: pods on node-1 are evicted and, created again (as their controller would), land elsewhere.
	k.must("apply", "-f", writeFile(t, "c.yaml", podYAML("c", "disktype: ssd")))
	if n := nodeOf("c"); n != "node-1" {
		t.Fatalf("pod c on %q, want node-1", n)
	}
	k.must("wait", "--for=condition=Ready", "pod/a", "pod/c", "--timeout=60s")
	out := k.must("drain", "node-1", "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=90s")
	for _, want := range []string{"node/node-1 cordoned", "evicting pod default/a", "pod/a evicted", "pod/c evicted", "node/node-1 drained"} {
		if !strings.Contains(out, want) {
			t.Errorf("drain output lacks %q:\n%s", want, out)
		}
	}
	if out := k.must("get", "pods", "--field-selector", "spec.nodeName=node-1", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("pods left on the drained node: %s", out)
	}
	k.must("apply", "-f", writeFile(t, "a2.yaml", podYAML("a", "")))
	if n := nodeOf("a"); n != "node-2" {
		t.Errorf("re-created pod a on %q, want node-2 (node-1 is drained)", n)
	}
	k.must("uncordon", "node-1")

	// apply a node.yaml: a node without an agent that pods schedule onto (they are bound, not run).
	if out := k.must("apply", "-f", writeFile(t, "node.yaml", kwokNodeYAML)); !strings.Contains(out, "node/kw-1 created") {
		t.Errorf("apply node: %s", out)
	}
	if out := k.must("get", "node", "kw-1"); !strings.Contains(out, "Ready") {
		t.Errorf("kwok node:\n%s", out)
	}
	// Re-apply with a change: strategic merge patch of the node.
	if out := k.must("apply", "-f", writeFile(t, "node2.yaml", strings.Replace(kwokNodeYAML, "pool: kwok,", "pool: kwok, tier: two,", 1))); !strings.Contains(out, "configured") {
		t.Errorf("re-apply node: %s", out)
	}
	kw := strings.Replace(podYAML("kw", "pool: kwok"), "  containers:", "  tolerations: [{key: kwok, operator: Exists, effect: NoSchedule}]\n  containers:", 1)
	k.must("apply", "-f", writeFile(t, "kw.yaml", kw))
	if n := nodeOf("kw"); n != "kw-1" {
		t.Errorf("pod kw on %q, want kw-1", n)
	}
	desc = k.must("describe", "node", "kw-1")
	for _, want := range []string{"pool=kwok", "tier=two", "kwok=true:NoSchedule", "Allocated resources", "default", "kw"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe kw-1 lacks %q:\n%s", want, desc)
		}
	}
	if out := k.must("delete", "pod", "kw", "--grace-period=0", "--force"); !strings.Contains(out, "deleted") {
		t.Errorf("delete kw: %s", out)
	}
	if out := k.must("delete", "node", "kw-1"); !strings.Contains(out, `node "kw-1" deleted`) {
		t.Errorf("delete node: %s", out)
	}
}

// Pods created already bound (spec.nodeName set) are admitted against the node's allocation like any
// scheduled pod: those that fit run, the rest wait (PodScheduled=False) instead of overcommitting it,
// and get their turn when room frees up.
func TestPreBoundPodsNeverOvercommit(t *testing.T) {
	needKubectl(t)
	cl, _ := startCluster(t, up.Config{Nodes: 1, NodeCPU: "1", StartDelay: 20 * time.Millisecond})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	create := func(name string) {
		y := strings.Replace(podYAML(name, ""), "cpu: 100m", "cpu: 400m", 1)
		y = strings.Replace(y, "  containers:", "  nodeName: node-1\n  containers:", 1)
		k.must("apply", "-f", writeFile(t, name+".yaml", y))
	}
	create("p1")
	create("p2")
	k.must("wait", "--for=condition=Ready", "pod/p1", "pod/p2", "--timeout=60s")
	create("p3")
	k.must("wait", "--for=condition=PodScheduled=False", "pod/p3", "--timeout=60s")
	if out := k.must("get", "pod", "p3", "-o", "jsonpath={.status.phase}/{.status.conditions[0].reason}"); out != "Pending/Unschedulable" {
		t.Errorf("p3 = %q, want Pending/Unschedulable", out)
	}
	k.must("delete", "pod", "p1", "--timeout=60s")
	k.must("wait", "--for=condition=Ready", "pod/p3", "--timeout=60s")
}

// podbus up --node-pools: agents shaped by their pool, or (register-only) nodes without agents.
func TestUpWithNodePools(t *testing.T) {
	needKubectl(t)
	pools, err := nodepool.Load("../examples/node-pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, registerOnly := range []bool{false, true} {
		cl, _ := startCluster(t, up.Config{NodePools: &pools, RegisterOnly: registerOnly, StartDelay: 20 * time.Millisecond})
		k := kube{t: t, kubeconfig: cl.Kubeconfig}
		out := k.must("get", "nodes", "-o", "name")
		if n := len(strings.Fields(out)); n != pools.Total() {
			t.Errorf("register-only=%v: %d nodes, want %d:\n%s", registerOnly, n, pools.Total(), out)
		}
		got := k.must("get", "node", "gpu-2", "-o", `jsonpath={.status.capacity.example\.com/gpu} {.spec.taints[0].key} {.metadata.labels.podbus\.io/pool}`)
		if got != "4 dedicated gpu" {
			t.Errorf("register-only=%v: gpu-2 = %q", registerOnly, got)
		}
		if z := k.must("get", "node", "general-2", "-o", `jsonpath={.metadata.labels.topology\.kubernetes\.io/zone}`); z != "zone-b" {
			t.Errorf("register-only=%v: general-2 zone %q", registerOnly, z)
		}
		k.must("wait", "--for=condition=Ready", "node", "--all", "--timeout=60s")
	}
}
