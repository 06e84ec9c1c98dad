package e2e

// Real containers through the whole pipeline: the real kubectl, the services of cluster/up, and node
// agents on the containerd runtime (agent/cri) pulling podbus's built-in images from a registry on
// loopback. They need root, containerd (deploy/containerd/start.sh), runc, the CNI plugins and
// busybox-static: without them they skip, but with CI=true they fail.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/google/uuid"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	podimages "github.com/podbus/podbus/internal/images"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// containerdAddress is the socket the tests use (.ci/run exports PODBUS_CONTAINERD_ADDRESS).
func containerdAddress() string {
	if a := os.Getenv("PODBUS_CONTAINERD_ADDRESS"); a != "" {
		return a
	}
	return cri.DefaultAddress
}

// needContainerd skips (fails with CI=true) unless this machine can run real pods and kubectl is there.
func needContainerd(t *testing.T) {
	t.Helper()
	needKubectl(t)
	err := cri.Check(context.Background(), containerdAddress(), nil)
	if err == nil {
		if _, serr := os.Stat(podimages.DefaultBusybox); serr != nil {
			err = podimages.ErrBusyboxMissing
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("real containers are required in CI: %v", err)
		}
		t.Skipf("real containers skipped: %v", err)
	}
}

// The built-in images are built and pushed once per test binary to a registry that lives as long as it.
var (
	registryOnce sync.Once
	registryAddr string
	registryErr  error
)

func builtinRegistry(t *testing.T) string {
	t.Helper()
	registryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "podbus-e2e-images-")
		if err != nil {
			registryErr = err
			return
		}
		defer os.RemoveAll(dir)
		ctx := context.Background()
		demo := filepath.Join(dir, "demo-web")
		if registryErr = podimages.BuildDemoWeb(ctx, demo); registryErr != nil {
			return
		}
		reg, err := podimages.StartRegistry(ctx, "127.0.0.1:0")
		if err != nil {
			registryErr = err
			return
		}
		registryAddr = reg.Addr()
		_, registryErr = podimages.PushBuiltins(ctx, registryAddr, podimages.Sources{DemoWeb: demo})
	})
	if registryErr != nil {
		t.Fatalf("built-in images: %v", registryErr)
	}
	return registryAddr
}

// Pod CIDRs apart from the runtime tests' 10.250.0.0/16 and from up's 10.244.1.0/24.
var (
	cidrBase = rand.IntN(200)
	cidrNext atomic.Int32
)

func realCIDR() string { return fmt.Sprintf("10.251.%d.0/24", (cidrBase+int(cidrNext.Add(1)))%256) }

// realNode is one node's identity on this machine: containerd namespace, pod CIDR and state dir of its own.
type realNode struct {
	name, cidr, ns, state string
}

func newRealNode(t *testing.T) realNode {
	t.Helper()
	id := uuid.NewString()[:8]
	n := realNode{name: "real-" + id, cidr: realCIDR(), ns: "podbus-e2e-" + id, state: t.TempDir()}
	// Registered before any agent of the node starts, so it runs after they stopped: whatever a failed
	// test left (sandboxes, containers, images, the namespace, the bridge) is removed.
	t.Cleanup(func() { n.cleanup(t) })
	return n
}

// runtime opens the node's runtime (the tests inspect containerd and clean up with it).
func (n realNode) runtime(t *testing.T) *cri.Runtime {
	t.Helper()
	rt, err := cri.New(context.Background(), cri.Config{NodeName: n.name, Address: containerdAddress(), Namespace: n.ns, PodCIDR: n.cidr, StateDir: n.state})
	if err != nil {
		t.Fatalf("containerd runtime for %s: %v", n.name, err)
	}
	return rt
}

func (n realNode) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// New also removes every netns of the node that no sandbox record names (what a killed agent left).
	rt, err := cri.New(ctx, cri.Config{NodeName: n.name, Address: containerdAddress(), Namespace: n.ns, PodCIDR: n.cidr, StateDir: n.state})
	if err != nil {
		t.Errorf("cleanup %s: %v", n.name, err)
		return
	}
	defer rt.Close()
	if sbs, err := rt.ListSandboxes(ctx); err == nil {
		for _, sb := range sbs {
			if err := rt.RemoveSandbox(ctx, sb.Sandbox); err != nil {
				t.Errorf("cleanup %s: %v", n.name, err)
			}
		}
	}
	if err := cri.RemoveNamespace(ctx, rt.Client(), n.ns); err != nil {
		t.Errorf("cleanup %s: containerd namespace %s left: %v", n.name, n.ns, err)
	}
	_ = exec.Command("ip", "link", "del", rt.BridgeName()).Run()
}

// noEviction turns the real node's hard eviction thresholds off. The kubelet's defaults would taint
// the node with disk pressure on a machine whose disk is more than 85 % full, and these tests are
// about the pipeline, not about the machine they run on; TestTopAndNodePressure sets its own.
const noEviction = agent.EvictionNone

// startAgent runs the node's agent in this process on a connection of its own until the test ends;
// each of more changes its configuration first.
func (n realNode) startAgent(t *testing.T, natsURL string, more ...func(*agent.Config)) {
	t.Helper()
	rt := n.runtime(t)
	conn := bustest.Conn(t, natsURL, "agent-"+n.name)
	cfg := agent.Config{
		Node: n.name, PodCIDR: n.cidr, CPU: "4", Memory: "8Gi", MaxPods: 20,
		HeartbeatInterval: time.Second, BackoffBase: time.Second, BackoffMax: 5 * time.Second,
		EvictionHard: noEviction,
	}
	for _, f := range more {
		f(&cfg)
	}
	a, err := agent.New(cfg, conn, rt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent %s: %v", n.name, err)
		}
		_ = rt.Close()
	})
	logNodeOnFailure(t, conn, n.name)
}

// logNodeOnFailure logs the node's taints and conditions if the test fails: a pod that stays Pending
// on a real node is most often a node the scheduler may not use.
func logNodeOnFailure(t *testing.T, c *bus.Conn, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		kv, err := c.JS.KeyValue(ctx, bus.BucketNodes)
		if err != nil {
			t.Logf("node %s: %v", name, err)
			return
		}
		var nd pb.Node
		if _, err := bus.Get(ctx, kv, bus.NodeKey(name), &nd); err != nil {
			t.Logf("node %s: %v", name, err)
			return
		}
		t.Logf("node %s at the failure: taints %v", name, nd.GetSpec().GetTaints())
		for _, cond := range nd.GetStatus().GetConditions() {
			t.Logf("  condition %s=%s %s: %s", cond.GetType(), cond.GetStatus(), cond.GetReason(), cond.GetMessage())
		}
	})
}

// storedPod reads one pod from the store (nil when it is not there).
func storedPod(t *testing.T, c *bus.Conn, ns, name string) *pb.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := c.JS.KeyValue(ctx, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	var p pb.Pod
	if _, err := bus.Get(ctx, kv, bus.PodKey(ns, name), &p); err != nil {
		return nil
	}
	return &p
}

// waitPod polls the pod until ok holds, failing with its status after timeout.
func waitPod(t *testing.T, c *bus.Conn, name string, timeout time.Duration, what string, ok func(*pb.Pod) bool) *pb.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := storedPod(t, c, "default", name)
		if p != nil && ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			js, _ := json.Marshal(p.GetStatus())
			t.Fatalf("pod %s: %s not reached after %s; status %s", name, what, timeout, js)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func firstStatus(p *pb.Pod) *pb.ContainerStatus {
	if cs := p.GetStatus().GetContainerStatuses(); len(cs) > 0 {
		return cs[0]
	}
	return nil
}

func inCIDR(t *testing.T, ip, cidr string) bool {
	t.Helper()
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	return n.Contains(net.ParseIP(ip))
}

func fetch(url string) (string, error) {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// tasks counts the running tasks of the namespace per pod uid, and lists the pod uids of every container.
func tasks(t *testing.T, client *containerd.Client, ns string) (running map[string]int, containers map[string]int) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), ns)
	cs, err := client.Containers(ctx)
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	running, containers = map[string]int{}, map[string]int{}
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue
			}
			t.Fatal(err)
		}
		uid := labels[cri.LabelPodUID]
		containers[uid]++
		task, err := c.Task(ctx, nil)
		if err != nil {
			continue
		}
		if st, err := task.Status(ctx); err == nil && st.Status == containerd.Running {
			running[uid]++
		}
	}
	return running, containers
}

// reservations lists the IPs host-local holds for the node (files named by IP under its IPAM dir).
func reservations(t *testing.T, n realNode, rt *cri.Runtime) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(n.state, "ipam", rt.NetworkName()))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// sandboxRecords reads the runtime's sandbox records of the node (StateDir/sandboxes/<pod uid>.json):
// pod uid -> netns path. Any other file there (a record half written when the agent died) is a stray.
func sandboxRecords(t *testing.T, n realNode) (recs map[string]string, strays map[string]string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(n.state, "sandboxes"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	recs, strays = map[string]string{}, map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(n.state, "sandboxes", e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		var rec struct {
			PodUID string `json:"podUID"`
			NetNS  string `json:"netns"`
		}
		_ = json.Unmarshal(b, &rec)
		if uid, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(uid, ".") && uid == rec.PodUID {
			recs[uid] = rec.NetNS
		} else {
			strays[e.Name()] = rec.NetNS
		}
	}
	return recs, strays
}

// checkStrays fails for every stray file among the sandbox records, saying whether its netns leaked.
func checkStrays(t *testing.T, strays map[string]string) {
	t.Helper()
	for name, netns := range strays {
		_, err := os.Stat(netns)
		t.Errorf("stray file %s among the sandbox records (netns %q, still there: %v)", name, netns, netns != "" && err == nil)
	}
}

func pinned(node string) string { return "  nodeSelector:\n    kubernetes.io/hostname: " + node + "\n" }

// The user flow of docs/containers.md and the kubelet behaviours around it, on two
// real nodes: readiness through an httpGet probe and the page fetched by pod IP, a liveness restart,
// CrashLoopBackOff, ImagePullBackOff, kubectl logs (--tail, -c, --previous), distinct pod CIDRs per node,
// and a delete that leaves no container, task, sandbox, netns or IP reservation behind.
func TestContainerdPods(t *testing.T) {
	needContainerd(t)
	reg := builtinRegistry(t)
	a, b := newRealNode(t), newRealNode(t)
	cl, conn := startCluster(t, up.Config{Nodes: 0})
	a.startAgent(t, cl.NATSURL)
	b.startAgent(t, cl.NATSURL)
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	bustest.Eventually(t, 30*time.Second, func() bool {
		out, _ := k.run("get", "nodes")
		return strings.Count(out, " Ready ") == 2
	}, "both real nodes Ready")

	demo, box := reg+"/podbus/demo-web:latest", reg+"/podbus/busybox:latest"
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
%[1]s  terminationGracePeriodSeconds: 5
  containers:
  - name: web
    image: %[3]s
    ports: [{containerPort: 8080}]
    resources: {requests: {cpu: 50m, memory: 16Mi}, limits: {cpu: 500m, memory: 64Mi}}
    readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: live}
spec:
%[1]s  terminationGracePeriodSeconds: 2
  containers:
  - name: live
    image: %[3]s
    args: ["--healthy-for", "2s"]
    livenessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1, failureThreshold: 2}
---
apiVersion: v1
kind: Pod
metadata: {name: crash}
spec:
%[1]s  containers:
  - name: crash
    image: %[4]s
    command: ["sh", "-c", "echo started $(cat /proc/sys/kernel/random/uuid); exit 3"]
---
apiVersion: v1
kind: Pod
metadata: {name: missing}
spec:
%[1]s  containers:
  - name: missing
    image: %[5]s/podbus/no-such-image:latest
---
apiVersion: v1
kind: Pod
metadata: {name: other}
spec:
%[2]s  terminationGracePeriodSeconds: 1
  containers:
  - name: other
    image: %[4]s
    command: ["sleep", "3600"]
`, pinned(a.name), pinned(b.name), demo, box, reg)
	k.must("apply", "-f", writeFile(t, "pods.yaml", manifest))

	// Readiness through the httpGet probe, then the page from the host by pod IP.
	web := waitPod(t, conn, "web", 60*time.Second, "Ready", isReady)
	ip := web.GetStatus().GetPodIp()
	if !inCIDR(t, ip, a.cidr) {
		t.Errorf("web has IP %q, outside its node's %s", ip, a.cidr)
	}
	body, err := fetch("http://" + ip + ":8080/")
	if err != nil || !strings.HasPrefix(body, "hello from ") || !strings.Contains(body, ip) {
		t.Errorf("GET http://%s:8080/: %q, %v", ip, body, err)
	}
	if out := k.must("get", "pods", "-o", "wide"); !strings.Contains(out, ip) || !strings.Contains(out, "1/1") {
		t.Errorf("get pods -o wide:\n%s", out)
	}

	// Pods on the two agents come from their own CIDRs.
	other := waitPod(t, conn, "other", 60*time.Second, "Running", func(p *pb.Pod) bool { return p.GetStatus().GetPhase() == "Running" })
	if oip := other.GetStatus().GetPodIp(); !inCIDR(t, oip, b.cidr) || inCIDR(t, oip, a.cidr) {
		t.Errorf("other on %s has IP %q, want one in %s", b.name, oip, b.cidr)
	}

	waitPod(t, conn, "live", 60*time.Second, "a liveness restart", func(p *pb.Pod) bool { return firstStatus(p).GetRestartCount() >= 1 })
	crash := waitPod(t, conn, "crash", 60*time.Second, "CrashLoopBackOff", func(p *pb.Pod) bool {
		cs := firstStatus(p)
		return cs.GetState().GetWaiting().GetReason() == "CrashLoopBackOff" && cs.GetRestartCount() >= 1
	})
	if ls := firstStatus(crash).GetLastState().GetTerminated(); ls.GetExitCode() != 3 {
		t.Errorf("crash: last state %v, want exit code 3", ls)
	}
	missing := waitPod(t, conn, "missing", 60*time.Second, "ImagePullBackOff", func(p *pb.Pod) bool {
		return firstStatus(p).GetState().GetWaiting().GetReason() == "ImagePullBackOff"
	})
	if msg := firstStatus(missing).GetState().GetWaiting().GetMessage(); !strings.Contains(msg, "no-such-image") {
		t.Errorf("ImagePullBackOff message %q does not name the image", msg)
	}
	if out := k.must("get", "pod", "missing"); !strings.Contains(out, "ImagePullBackOff") && !strings.Contains(out, "ErrImagePull") {
		t.Errorf("get pod missing:\n%s", out)
	}

	// Logs, through the API and the node's agent.
	if out := k.must("logs", "web"); !strings.Contains(out, "demo-web listening") || !strings.Contains(out, "GET / 200") {
		t.Errorf("logs web:\n%s", out)
	}
	if out := k.must("logs", "web", "-c", "web", "--tail=1"); strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "GET") {
		t.Errorf("logs web -c web --tail=1 gave more or less than the last line:\n%s", out)
	}
	if out, err := k.run("logs", "web", "-c", "nope"); err == nil {
		t.Errorf("logs of a container the pod does not have: %s", out)
	}
	// The previous instance of live failed its liveness probe: its log has the 500s.
	if out := k.must("logs", "live", "--previous"); !strings.Contains(out, "demo-web listening") || !strings.Contains(out, "/healthz 500") {
		t.Errorf("logs live --previous:\n%s", out)
	}
	// In CrashLoopBackOff both show the last run, as the kubelet's do (its lastState is the previous one).
	if out := k.must("logs", "crash", "--previous"); !strings.Contains(out, "started ") {
		t.Errorf("logs crash --previous: %q", out)
	}
	// The current attempt may just be starting, before its echo: poll.
	bustest.Eventually(t, 20*time.Second, func() bool {
		out, _ := k.run("logs", "crash")
		return strings.Contains(out, "started ")
	}, "logs crash showing a run's output")

	// Delete: the container stops within the grace period, and nothing of the pod is left on the node.
	rt := a.runtime(t)
	defer rt.Close()
	uid := web.GetMetadata().GetUid()
	recsA, _ := sandboxRecords(t, a)
	netns := recsA[uid]
	if netns == "" {
		t.Fatalf("no sandbox record of web (uid %s)", uid)
	}
	k.must("delete", "pod", "web", "--timeout=60s")
	if p := storedPod(t, conn, "default", "web"); p != nil {
		t.Errorf("web still in the store after delete")
	}
	bustest.Eventually(t, 20*time.Second, func() bool {
		running, containers := tasks(t, rt.Client(), a.ns)
		return running[uid] == 0 && containers[uid] == 0
	}, "web's containers and tasks removed")
	recsA, strays := sandboxRecords(t, a)
	checkStrays(t, strays)
	if _, ok := recsA[uid]; ok {
		t.Errorf("web's sandbox record is still there")
	}
	if _, err := os.Stat(netns); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("web's netns %s: %v, want it gone", netns, err)
	}
	for _, r := range reservations(t, a, rt) {
		if r == ip {
			t.Errorf("web's IP %s is still reserved", ip)
		}
	}
}

// Kill the agent (SIGKILL, a separate process) while five pods are starting, start it again on the same
// state: every pod ends with exactly one running container, and nothing is left over; deleting them then
// leaves no container, sandbox, netns or IP reservation.
func TestContainerdAgentKilledWhileStarting(t *testing.T) {
	needContainerd(t)
	reg := builtinRegistry(t)
	bin := buildPodbus(t)
	n := newRealNode(t)
	cl, conn := startCluster(t, up.Config{Nodes: 0})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	args := []string{"agent", "--nats", cl.NATSURL, "--node", n.name, "--runtime", "containerd", "--pod-cidr", n.cidr,
		"--containerd-address", containerdAddress(), "--containerd-namespace", n.ns, "--state-dir", n.state,
		"--cpu", "4", "--memory", "8Gi", "--heartbeat", "1s"}
	first := spawn(t, bin, "agent (first)", args...)
	bustest.Eventually(t, 30*time.Second, func() bool {
		out, _ := k.run("get", "nodes")
		return strings.Contains(out, n.name) && strings.Contains(out, " Ready ")
	}, "the real node Ready")

	var manifest strings.Builder
	for i := range 5 {
		fmt.Fprintf(&manifest, `---
apiVersion: v1
kind: Pod
metadata: {name: p%d}
spec:
%s  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s/podbus/busybox:latest
    command: ["sh", "-c", "echo up; exec sleep 3600"]
    resources: {requests: {cpu: 10m, memory: 8Mi}}
`, i, pinned(n.name), reg)
	}
	k.must("apply", "-f", writeFile(t, "five.yaml", manifest.String()))

	// Kill as soon as the first sandbox exists: the rest are being set up, pulled or started.
	bustest.Eventually(t, 60*time.Second, func() bool { recs, _ := sandboxRecords(t, n); return len(recs) > 0 }, "a sandbox being made")
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.cmd.Wait()
	readyAtKill := 0
	for _, p := range pods(t, conn) {
		if isReady(p) {
			readyAtKill++
		}
	}
	recs, strays := sandboxRecords(t, n)
	t.Logf("killed the agent with %d sandbox record(s), %d half-written, and %d of 5 pods Ready", len(recs), len(strays), readyAtKill)

	spawn(t, bin, "agent (restarted)", args...)
	restarted := time.Now()
	all := waitAll(t, conn, 5, 90*time.Second, isReady)
	t.Logf("all 5 Ready %s after the restart", time.Since(restarted).Round(time.Millisecond))

	rt := n.runtime(t)
	defer rt.Close()
	uids := map[string]bool{}
	for _, p := range all {
		uids[p.GetMetadata().GetUid()] = true
	}
	// Reconciliation may still be removing what it found; the end state must be exact.
	var running, containers map[string]int
	deadline := time.Now().Add(20 * time.Second)
	for {
		running, containers = tasks(t, rt.Client(), n.ns)
		exact := len(running) == 5 && len(containers) == 5
		for uid := range uids {
			exact = exact && running[uid] == 1 && containers[uid] == 1
		}
		if exact || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for uid := range uids {
		if running[uid] != 1 {
			t.Errorf("pod %s has %d running containers, want 1", uid, running[uid])
		}
	}
	for uid, c := range containers {
		if !uids[uid] {
			t.Errorf("%d container(s) left of pod %q, which is not among the five", c, uid)
		}
	}
	recs, strays = sandboxRecords(t, n)
	checkStrays(t, strays)
	if len(recs) != 5 {
		t.Errorf("%d sandbox records, want 5: %v", len(recs), recs)
	}
	for uid, netns := range recs {
		if !uids[uid] {
			t.Errorf("sandbox record of pod %s left over", uid)
		}
		if _, err := os.Stat(netns); err != nil {
			t.Errorf("netns of pod %s: %v", uid, err)
		}
	}
	if ips := reservations(t, n, rt); len(ips) != 5 {
		t.Errorf("%d IPs reserved, want 5: %v", len(ips), ips)
	}
	if nss := netnsOf(t, n); len(nss) != 5 {
		t.Errorf("%d netns in %s, want the 5 the records name: %v", len(nss), cri.NetNSDir(n.state), nss)
	}
	for _, p := range all {
		name := p.GetMetadata().GetName()
		if out := k.must("logs", name); !strings.Contains(out, "up") {
			t.Errorf("logs %s: %q", name, out)
		}
	}

	deleting := time.Now()
	k.must("delete", "pod", "p0", "p1", "p2", "p3", "p4", "--timeout=60s")
	t.Logf("kubectl delete took %s", time.Since(deleting).Round(time.Millisecond))
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, containers := tasks(t, rt.Client(), n.ns)
		left, _ := sandboxRecords(t, n)
		ips := reservations(t, n, rt)
		if len(containers) == 0 && len(left) == 0 && len(ips) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after delete: containers per pod %v, sandbox records %v, reserved IPs %v", containers, left, ips)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, netns := range recs {
		if _, err := os.Stat(netns); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("netns %s: %v, want it gone", netns, err)
		}
	}
	// Also those no record named when the agent was killed (swept by the restarted agent).
	if nss := netnsOf(t, n); len(nss) != 0 {
		t.Errorf("netns of the node left after the pods' deletion: %v", nss)
	}
}

// netnsOf lists the node's network namespaces (cri.NetNSDir of its state).
func netnsOf(t *testing.T, n realNode) []string {
	t.Helper()
	entries, err := os.ReadDir(cri.NetNSDir(n.state))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
