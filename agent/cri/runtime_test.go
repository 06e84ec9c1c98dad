package cri_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/pkg/netns"
	"github.com/google/uuid"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Each test gets /24s of its own: two bridges on one subnet would break the host's routing. The random
// base keeps concurrent runs of this package apart too.
var (
	cidrBase = rand.IntN(200)
	cidrNext atomic.Int32
)

func testCIDR() string {
	return fmt.Sprintf("10.250.%d.0/24", (cidrBase+int(cidrNext.Add(1)))%256)
}

func testNode() string { return "t-" + uuid.NewString()[:8] }

func httpGet(url string) (string, error) {
	client := http.Client{Timeout: time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// webServer serves "hello from podbus" on port 8080 with busybox httpd.
func webServer(image string) *pb.Container {
	return ctr("web", image, "sh", "-c", "mkdir -p /www && echo hello from podbus >/www/index.html && exec httpd -f -p 8080 -h /www")
}

func TestPodServesHTTPByIP(t *testing.T) {
	requireContainerd(t)
	_, busybox := startRegistry(t)
	cidr := testCIDR()
	r := newRuntime(t, testNode(), cidr, testNamespace(), "")
	ctx := context.Background()

	// Pull first: the latency figure is create→Running of a pod whose image is present.
	if _, err := r.PullImage(ctx, busybox, "IfNotPresent"); err != nil {
		t.Fatal(err)
	}
	p := newPod("web", webServer(busybox))
	start := time.Now()
	sb, ids := runPod(t, r, p)
	st, err := r.ContainerStatus(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create→Running: %d ms (sandbox+CNI, create, start)", time.Since(start).Milliseconds())
	if st.State != agent.StateRunning || st.StartedAt.IsZero() || st.Name != "web" || !strings.Contains(st.ImageRef, "@sha256:") {
		t.Errorf("status %+v", st)
	}
	if !netip.MustParsePrefix(cidr).Contains(netip.MustParseAddr(sb.IP)) {
		t.Errorf("pod IP %s not in %s", sb.IP, cidr)
	}
	eventually(t, 10*time.Second, "the pod's page", func() error {
		body, err := httpGet("http://" + sb.IP + ":8080/")
		if err == nil && !strings.Contains(body, "hello from podbus") {
			return fmt.Errorf("page %q", body)
		}
		return err
	})
	if err := r.CheckSandbox(ctx, sb); err != nil {
		t.Errorf("CheckSandbox: %v", err)
	}
	v, err := r.Version(ctx)
	if err != nil || !strings.HasPrefix(v, "containerd://") {
		t.Errorf("Version %q, %v", v, err)
	}
	// RunSandbox is idempotent.
	again, err := r.RunSandbox(ctx, p)
	if err != nil || again.ID != sb.ID || again.IP != sb.IP {
		t.Errorf("second RunSandbox = %+v, %v; want %+v", again, err, sb)
	}
}

func TestPodsTalkByIP(t *testing.T) {
	requireContainerd(t)
	_, busybox := startRegistry(t)
	ns := testNamespace()
	cidrA, cidrB := testCIDR(), testCIDR()
	a := newRuntime(t, testNode(), cidrA, ns, "")
	b := newRuntime(t, testNode(), cidrB, ns, "")
	ctx := context.Background()

	server, _ := runPod(t, a, newPod("server", webServer(busybox)))
	_, clientIDs := runPod(t, a, newPod("client", ctr("sleeper", busybox, "sleep", "3600")))
	eventually(t, 10*time.Second, "wget from one pod to the other", func() error {
		res, err := a.ExecSync(ctx, clientIDs[0], []string{"wget", "-q", "-O-", "http://" + server.IP + ":8080/"}, 5*time.Second)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 || !strings.Contains(string(res.Output), "hello from podbus") {
			return notYet("exit %d: %s", res.ExitCode, res.Output)
		}
		return nil
	})

	other, _ := runPod(t, b, newPod("other", ctr("sleeper", busybox, "sleep", "3600")))
	if !netip.MustParsePrefix(cidrA).Contains(netip.MustParseAddr(server.IP)) ||
		!netip.MustParsePrefix(cidrB).Contains(netip.MustParseAddr(other.IP)) {
		t.Errorf("IPs %s (want in %s) and %s (want in %s)", server.IP, cidrA, other.IP, cidrB)
	}
}

func TestRemoveSandboxRemovesEverything(t *testing.T) {
	requireContainerd(t)
	_, busybox := startRegistry(t)
	ns := testNamespace()
	state := t.TempDir()
	r := newRuntime(t, testNode(), testCIDR(), ns, state)
	ctx := context.Background()

	p := newPod("doomed", ctr("a", busybox, "sleep", "3600"), ctr("b", busybox, "sleep", "3600"))
	sb, ids := runPod(t, r, p)
	var rec struct {
		NetNS string `json:"netns"`
	}
	if b, err := os.ReadFile(filepath.Join(state, "sandboxes", p.Metadata.Uid+".json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &rec); err != nil || !strings.HasPrefix(rec.NetNS, cri.NetNSDir(state)+"/") {
		t.Fatalf("sandbox record: %s, %v", b, err)
	}
	if _, err := os.Stat(rec.NetNS); err != nil {
		t.Fatalf("netns: %v", err)
	}
	reservation := filepath.Join(state, "ipam", r.NetworkName(), sb.IP)
	if _, err := os.Stat(reservation); err != nil {
		t.Fatalf("IP reservation: %v", err)
	}

	for _, id := range ids {
		if err := r.StopContainer(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.RemoveSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	cs, err := r.Client().Containers(ctx, fmt.Sprintf("labels.%q==%q", cri.LabelPodUID, p.Metadata.Uid))
	if err != nil || len(cs) != 0 {
		t.Errorf("containers of the pod after removal: %d, %v", len(cs), err)
	}
	tl, err := r.Client().TaskService().List(ctx, &tasks.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tl.Tasks {
		for _, id := range ids {
			if task.ID == string(id) {
				t.Errorf("task %s still exists", id)
			}
		}
	}
	if _, err := os.Stat(reservation); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("IP reservation %s still there: %v", reservation, err)
	}
	if _, err := os.Stat(rec.NetNS); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns %s still there: %v", rec.NetNS, err)
	}
	recs, _ := filepath.Glob(filepath.Join(state, "sandboxes", "*.json"))
	if len(recs) != 0 {
		t.Errorf("sandbox records left: %v", recs)
	}
	sbs, err := r.ListSandboxes(ctx)
	if err != nil || len(sbs) != 0 {
		t.Errorf("ListSandboxes after removal: %v, %v", sbs, err)
	}
	// Removing again is fine.
	if err := r.RemoveSandbox(ctx, sb); err != nil {
		t.Errorf("second RemoveSandbox: %v", err)
	}
}

func TestExitCodeLogsAndPreviousAttempt(t *testing.T) {
	requireContainerd(t)
	_, busybox := startRegistry(t)
	r := newRuntime(t, testNode(), testCIDR(), testNamespace(), "")
	ctx := context.Background()

	c := ctr("job", busybox, "sh", "-c", "echo hi; exit 3")
	p := newPod("job", c)
	sb, ids := runPod(t, r, p)
	exited := waitExit(t, r, ids[0])
	if exited.State != agent.StateExited || exited.ExitCode != 3 || exited.FinishedAt.IsZero() || exited.StartedAt.IsZero() {
		t.Errorf("status after exit: %+v", exited)
	}
	st, err := r.ContainerStatus(ctx, ids[0])
	if err != nil || st.State != agent.StateExited || st.ExitCode != 3 {
		t.Errorf("ContainerStatus = %+v, %v", st, err)
	}
	if got := logs(t, r, ids[0], agent.LogOptions{}); got != "hi\n" {
		t.Errorf("log of attempt 0 = %q", got)
	}

	c.Command = []string{"sh", "-c", "echo one; echo two; echo three; exit 0"}
	id1 := startContainer(t, r, sb, c, 1)
	if st := waitExit(t, r, id1); st.ExitCode != 0 || st.Attempt != 1 {
		t.Errorf("attempt 1: %+v", st)
	}
	if got := logs(t, r, id1, agent.LogOptions{}); got != "one\ntwo\nthree\n" {
		t.Errorf("log of attempt 1 = %q", got)
	}
	if got := logs(t, r, id1, agent.LogOptions{TailLines: 2}); got != "two\nthree\n" {
		t.Errorf("tail 2 of attempt 1 = %q", got)
	}
	if got := logs(t, r, id1, agent.LogOptions{Previous: true}); got != "hi\n" {
		t.Errorf("previous log = %q", got)
	}
	// The previous attempt's log outlives its container.
	if err := r.RemoveContainer(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if got := logs(t, r, id1, agent.LogOptions{Previous: true}); got != "hi\n" {
		t.Errorf("previous log after removing attempt 0 = %q", got)
	}
	if _, err := r.ContainerStatus(ctx, ids[0]); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("status of a removed container: %v", err)
	}
}

func waitExit(t *testing.T, r *cri.Runtime, id agent.ContainerID) agent.ContainerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := r.WaitContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-ch:
		return st
	case <-ctx.Done():
		t.Fatalf("container %s did not exit", id)
		return agent.ContainerStatus{}
	}
}

func logs(t *testing.T, r *cri.Runtime, id agent.ContainerID, opts agent.LogOptions) string {
	t.Helper()
	var buf bytes.Buffer
	if err := r.ContainerLogs(context.Background(), id, &buf, opts); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestReconcileAfterRestart(t *testing.T) {
	requireContainerd(t)
	_, busybox := startRegistry(t)
	ns, node, cidr, state := testNamespace(), testNode(), testCIDR(), t.TempDir()
	ctx := context.Background()

	first, err := cri.New(ctx, cri.Config{NodeName: node, Address: address(), Namespace: ns, PodCIDR: cidr, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := newPod("one", webServer(busybox)), newPod("two", ctr("sleeper", busybox, "sleep", "3600"))
	sb1, ids1 := runPod(t, first, p1)
	sb2, ids2 := runPod(t, first, p2)
	if err := first.Close(); err != nil { // the agent goes away; its pods stay
		t.Fatal(err)
	}

	r := newRuntime(t, node, cidr, ns, state)
	sbs, err := r.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]agent.ContainerID{sb1.PodUID: ids1[0], sb2.PodUID: ids2[0]}
	if len(sbs) != 2 {
		t.Fatalf("ListSandboxes: %d sandboxes, want 2: %+v", len(sbs), sbs)
	}
	for _, info := range sbs {
		if len(info.Containers) != 1 || info.Containers[0].ID != want[info.PodUID] || info.Containers[0].State != agent.StateRunning {
			t.Errorf("sandbox %s: containers %+v, want %s running", info.Name, info.Containers, want[info.PodUID])
		}
		if info.IP == "" {
			t.Errorf("sandbox %s without IP", info.Name)
		}
		if err := r.CheckSandbox(ctx, info.Sandbox); err != nil {
			t.Errorf("CheckSandbox %s: %v", info.Name, err)
		}
	}
	if _, err := httpGet("http://" + sb1.IP + ":8080/"); err != nil {
		t.Errorf("pod one after the restart: %v", err)
	}
	for _, info := range sbs {
		if err := r.RemoveSandbox(ctx, info.Sandbox); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := r.Client().Containers(ctx)
	if err != nil || len(cs) != 0 {
		t.Errorf("containers left: %d, %v", len(cs), err)
	}
}

func TestPullPolicies(t *testing.T) {
	requireContainerd(t)
	reg, busybox := startRegistry(t)
	r := newRuntime(t, testNode(), testCIDR(), testNamespace(), "")
	ctx := context.Background()

	if _, err := r.PullImage(ctx, busybox, "Never"); !errors.Is(err, agent.ErrImageNeverPull) {
		t.Errorf("Never, absent: %v, want ErrImageNeverPull", err)
	}
	if pulled, err := r.PullImage(ctx, busybox, "IfNotPresent"); err != nil || !pulled {
		t.Errorf("IfNotPresent, absent: pulled %v, %v", pulled, err)
	}
	if pulled, err := r.PullImage(ctx, busybox, "IfNotPresent"); err != nil || pulled {
		t.Errorf("IfNotPresent, present: pulled %v, %v", pulled, err)
	}
	if pulled, err := r.PullImage(ctx, busybox, "Never"); err != nil || pulled {
		t.Errorf("Never, present: pulled %v, %v", pulled, err)
	}
	if pulled, err := r.PullImage(ctx, busybox, "Always"); err != nil || !pulled {
		t.Errorf("Always: pulled %v, %v", pulled, err)
	}
	_, err := r.PullImage(ctx, reg+"/podbus/missing:1", "IfNotPresent")
	if !errors.Is(err, agent.ErrImagePull) || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing image: %v, want ErrImagePull saying not found", err)
	}
	t.Logf("missing image: %v", err)
}

// An agent killed inside RunSandbox leaves a record without IP (and a netns): listing shows it, and
// both a new RunSandbox of the pod and RemoveSandbox clean it up, with the netns in the node's dir or
// (written by an older version) in /var/run/netns.
func TestInterruptedSandboxStart(t *testing.T) {
	requireContainerd(t)
	state := t.TempDir()
	r := newRuntime(t, testNode(), testCIDR(), testNamespace(), state)
	ctx := context.Background()

	for _, tc := range []struct {
		retry bool
		dir   string
	}{{true, cri.NetNSDir(state)}, {false, cri.NetNSDir(state)}, {true, cri.LegacyNetNSDir}, {false, cri.LegacyNetNSDir}} {
		retry := tc.retry
		p := newPod("half", ctr("c", "busybox"))
		ns, err := netns.NewNetNS(tc.dir)
		if err != nil {
			t.Fatal(err)
		}
		rec := fmt.Sprintf(`{"id":%q,"podUID":%q,"namespace":"default","name":"half","netns":%q,"created":%q}`,
			uuid.NewString(), p.Metadata.Uid, ns.GetPath(), time.Now().Format(time.RFC3339Nano))
		if err := os.WriteFile(filepath.Join(state, "sandboxes", p.Metadata.Uid+".json"), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
		sbs, err := r.ListSandboxes(ctx)
		if err != nil || len(sbs) != 1 || sbs[0].IP != "" {
			t.Fatalf("ListSandboxes = %+v, %v; want the half-started one without IP", sbs, err)
		}
		if err := r.CheckSandbox(ctx, sbs[0].Sandbox); err == nil {
			t.Error("CheckSandbox of a half-started sandbox succeeded")
		}
		if retry {
			sb, err := r.RunSandbox(ctx, p)
			if err != nil || sb.IP == "" || sb.ID == sbs[0].ID {
				t.Fatalf("RunSandbox after an interrupted start = %+v, %v", sb, err)
			}
			if err := r.RemoveSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		} else if err := r.RemoveSandbox(ctx, sbs[0].Sandbox); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(ns.GetPath()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("netns of the interrupted start still there: %v", err)
		}
		if sbs, err := r.ListSandboxes(ctx); err != nil || len(sbs) != 0 {
			t.Errorf("sandboxes left: %+v, %v", sbs, err)
		}
	}
	ipam, _ := filepath.Glob(filepath.Join(state, "ipam", r.NetworkName(), "1*"))
	if len(ipam) != 0 {
		t.Errorf("IP reservations left: %v", ipam)
	}
}

// CNI CHECK notices a broken pod network: with the pod's veth deleted on the host, CheckSandbox fails,
// and RemoveSandbox still cleans up.
func TestCheckSandboxNoticesBrokenNetwork(t *testing.T) {
	requireContainerd(t)
	_, busybox := startRegistry(t)
	r := newRuntime(t, testNode(), testCIDR(), testNamespace(), "")
	ctx := context.Background()
	sb, _ := runPod(t, r, newPod("victim", ctr("sleeper", busybox, "sleep", "3600")))
	if err := r.CheckSandbox(ctx, sb); err != nil {
		t.Fatalf("CheckSandbox of a healthy pod: %v", err)
	}
	// The bridge is the node's own and this is its only pod: its one port is the pod's veth.
	out, err := exec.Command("ip", "-o", "link", "show", "master", r.BridgeName()).Output()
	if err != nil {
		t.Fatalf("ip link show master %s: %v", r.BridgeName(), err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 {
		t.Fatalf("ports of %s: %q, want one", r.BridgeName(), out)
	}
	veth, _, _ := strings.Cut(strings.TrimSpace(strings.SplitN(lines[0], ":", 3)[1]), "@")
	if b, err := exec.Command("ip", "link", "del", veth).CombinedOutput(); err != nil {
		t.Fatalf("ip link del %s: %v: %s", veth, err, b)
	}
	err = r.CheckSandbox(ctx, sb)
	if err == nil {
		t.Fatal("CheckSandbox passed with the pod's veth deleted")
	}
	t.Logf("CheckSandbox: %v", err)
	if err := r.RemoveSandbox(ctx, sb); err != nil {
		t.Errorf("RemoveSandbox of the broken pod: %v", err)
	}
}

// A node restarted with another pod CIDR finds its bridge with the old gateway address; the bridge plugin
// would refuse it forever, so New removes it when no pod of the node is recorded, and refuses to start
// when some are.
func TestStaleBridgeOfAnotherCIDR(t *testing.T) {
	requireContainerd(t)
	node := "stale-" + uuid.NewString()[:6]
	br := cri.BridgeFor(node)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("link", "add", br, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", br).Run() })
	ip("addr", "add", "10.249.9.1/24", "dev", br)

	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "sandboxes"), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(state, "sandboxes", "some-pod.json")
	if err := os.WriteFile(rec, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cri.New(context.Background(), cri.Config{NodeName: node, Address: address(), Namespace: testNamespace(), PodCIDR: "10.249.10.0/24", StateDir: state}); err == nil || !strings.Contains(err.Error(), "outside the pod CIDR") {
		t.Fatalf("New with recorded pods on a stale bridge: err = %v, want a refusal", err)
	}
	if err := os.Remove(rec); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, node, "10.249.10.0/24", testNamespace(), state)
	if _, err := net.InterfaceByName(br); err == nil {
		t.Fatalf("bridge %s with the old address is still there", br)
	}
	_, busybox := startRegistry(t)
	sb, _ := runPod(t, r, newPod("after-stale", ctr("c", busybox, "sleep", "60")))
	if !strings.HasPrefix(sb.IP, "10.249.10.") {
		t.Errorf("pod IP %s, want one of 10.249.10.0/24", sb.IP)
	}
}
