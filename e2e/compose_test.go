//go:build compose

// The docker-compose deployment test (make compose-test): the podbus image, deploy/docker-compose.yml with a
// 3-node NATS cluster and R3 streams, 900 pods through the real kubectl while schedulers scale out and a NATS
// node and a scheduler stop, then `down -v` leaving nothing behind. It skips without docker, except in CI.
package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/natsauth"
	"github.com/podbus/podbus/internal/pki"
)

const (
	composeProject = "podbustest"
	composeAgents  = 5
	composeBatch   = 300
	// composeServices are the containers besides the agents with one scheduler: three NATS nodes,
	// admission, store, scheduler, binder, status, namespaces, nodelifecycle, controllers, workloads and auditseal.
	composeServices = 13
	// composeApplyLimit bounds one kubectl apply of a batch: kubectl sends its requests one at a time,
	// each a quorum round trip or two at R3, so a loaded machine needs more than run's minute.
	composeApplyLimit = 3 * time.Minute
)

type composeEnv struct {
	t       *testing.T
	root    string   // repository root
	compose []string // docker-compose, or docker compose
	api     string   // https://127.0.0.1:<port>
	kube    kube
	client  *http.Client // the admin of the kubeconfig the admission container wrote
}

// needDocker finds docker, a compose implementation and kubectl; without them it skips, but fails in CI.
func needDocker(t *testing.T) []string {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("required in CI: "+format, args...)
		}
		t.Skipf("compose test skipped: "+format, args...)
	}
	needKubectl(t)
	if _, err := exec.LookPath("docker"); err != nil {
		fail("docker not installed (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		fail("docker daemon not reachable: %v: %s", err, out)
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	fail("neither docker-compose nor the docker compose plugin is installed")
	return nil
}

func (c *composeEnv) cmd(timeout time.Duration, name string, args ...string) (string, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *composeEnv) must(timeout time.Duration, name string, args ...string) string {
	c.t.Helper()
	out, err := c.cmd(timeout, name, args...)
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// dc runs docker-compose on the project.
func (c *composeEnv) dc(timeout time.Duration, args ...string) (string, error) {
	c.t.Helper()
	full := append(append(c.compose[1:len(c.compose):len(c.compose)], "-p", composeProject, "-f", "deploy/docker-compose.yml"), args...)
	return c.cmd(timeout, c.compose[0], full...)
}

func (c *composeEnv) mustDC(timeout time.Duration, args ...string) string {
	c.t.Helper()
	out, err := c.dc(timeout, args...)
	if err != nil {
		c.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// containers lists the project's containers (all states): id -> "service status".
func (c *composeEnv) containers(service string) map[string]string {
	c.t.Helper()
	args := []string{"ps", "-a", "--no-trunc", "--filter", "label=com.docker.compose.project=" + composeProject,
		"--format", `{{.ID}}	{{.Label "com.docker.compose.service"}}	{{.Status}}`}
	if service != "" {
		args = append(args, "--filter", "label=com.docker.compose.service="+service)
	}
	out := c.must(30*time.Second, "docker", args...)
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if id, rest, ok := strings.Cut(line, "\t"); ok {
			m[id] = strings.ReplaceAll(rest, "\t", " ")
		}
	}
	return m
}

// waitHealthy waits until want containers run and every running one reports (healthy).
func (c *composeEnv) waitHealthy(want int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		healthy, up := 0, 0
		all := c.containers("")
		for _, st := range all {
			if strings.Contains(st, " Up ") {
				up++
				if strings.Contains(st, "(healthy)") {
					healthy++
				}
			}
		}
		if healthy == want && up == want {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %s: %d of %d containers healthy: %v", timeout, healthy, want, all)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (c *composeEnv) getJSON(path string, into any) error {
	return getJSON(c.client, c.api+path, into)
}

// getJSON decodes the JSON that url answers with 200.
func getJSON(client *http.Client, url string, into any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPods polls the API until want pods with the selector are Ready (or, with ready false, exist).
func (c *composeEnv) waitPods(selector string, want int, ready bool, timeout time.Duration) []corev1.Pod {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var list corev1.PodList
		err := c.getJSON("/api/v1/namespaces/default/pods?labelSelector="+selector, &list)
		n := 0
		if err == nil {
			for i := range list.Items {
				if !ready || podReady(&list.Items[i]) {
					n++
				}
			}
			if n >= want {
				return list.Items
			}
		}
		if time.Now().After(deadline) {
			var sample []string
			for i := range list.Items {
				if p := &list.Items[i]; !podReady(p) && len(sample) < 10 {
					st, _ := json.Marshal(p.Status)
					sample = append(sample, fmt.Sprintf("%s node=%q uid=%s status=%s", p.Name, p.Spec.NodeName, p.UID, st))
				}
			}
			c.t.Fatalf("after %s: %d of %d pods (%s) ready=%v; last error %v; not ready:\n%s", timeout, n, want, selector, ready, err, strings.Join(sample, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// manifest writes count pods labelled batch=<batch> into one file, separated by ---.
func manifest(t *testing.T, batch string, count int) string {
	var b strings.Builder
	for i := 0; i < count; i++ {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata:
  name: %s-%03d
  labels: {batch: %s}
spec:
  containers:
  - name: app
    image: example.local/app:1
    resources:
      requests: {cpu: 10m, memory: 16Mi}
`, batch, i, batch)
	}
	return writeFile(t, batch+".yaml", b.String())
}

// apply runs kubectl apply, retrying: a create that times out while NATS elects a new leader answers 504
// (the pod still appears), and kubectl apply is idempotent, as a user would rerun it.
func (c *composeEnv) apply(file string) (attempts int) {
	c.t.Helper()
	var out string
	var err error
	for attempts = 1; attempts <= 5; attempts++ {
		if out, err = c.kube.runFor(composeApplyLimit, "apply", "-f", file); err == nil {
			return attempts
		}
		c.t.Logf("kubectl apply attempt %d: %v: %s", attempts, err, lastLines(out, 3))
		time.Sleep(time.Second)
	}
	c.t.Fatalf("kubectl apply -f %s failed %d times: %v\n%s", file, attempts-1, err, lastLines(out, 10))
	return attempts
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// batch applies one batch and waits until all its pods are Ready: pods/s from the apply to the last Ready.
func (c *composeEnv) batch(name string) float64 {
	c.t.Helper()
	file := manifest(c.t, name, composeBatch)
	start := time.Now()
	c.apply(file)
	c.waitPods("batch%3D"+name, composeBatch, true, 3*time.Minute)
	return composeBatch / time.Since(start).Seconds()
}

func (c *composeEnv) exitCode(id string) string {
	c.t.Helper()
	return strings.TrimSpace(c.must(30*time.Second, "docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", id))
}

func (c *composeEnv) leftovers() []string {
	c.t.Helper()
	var left []string
	f := "label=com.docker.compose.project=" + composeProject
	for _, args := range [][]string{{"ps", "-aq", "--filter", f}, {"network", "ls", "-q", "--filter", f}, {"volume", "ls", "-q", "--filter", f}} {
		if out := strings.TrimSpace(c.must(30*time.Second, "docker", args...)); out != "" {
			left = append(left, args[0]+": "+strings.ReplaceAll(out, "\n", " "))
		}
	}
	return left
}

// startCompose builds the image, starts the project with agents simulated nodes and one scheduler, and
// waits until every container is healthy, the kubeconfig is out and the nodes are Ready; it returns how
// long that took. Unless the test sets *downDone, cleanup takes the project down (logs first on failure).
func startCompose(t *testing.T, agents int) (c *composeEnv, healthy time.Duration, downDone *bool) {
	t.Helper()
	dc := needDocker(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	port := os.Getenv("PODBUS_API_PORT")
	if port == "" {
		port = "16443"
	}
	c = &composeEnv{t: t, root: root, compose: dc, api: "https://127.0.0.1:" + port}
	c.kube = kube{t: t, kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}

	start := time.Now()
	c.must(10*time.Minute, "make", "images")
	t.Logf("make images: %s", time.Since(start).Round(time.Second))

	// A previous run killed half-way may have left the project behind.
	_, _ = c.dc(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "5")
	downDone = new(bool)
	t.Cleanup(func() {
		if *downDone {
			return
		}
		if t.Failed() && os.Getenv("PODBUS_COMPOSE_KEEP") != "" {
			t.Logf("PODBUS_COMPOSE_KEEP: project %s left running", composeProject)
			return
		}
		if t.Failed() {
			out, _ := c.dc(time.Minute, "logs", "--no-color", "--tail", "40")
			t.Logf("logs:\n%s", out)
		}
		if out, err := c.dc(2*time.Minute, "down", "-v", "--remove-orphans", "-t", "10"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, out)
		}
	})

	start = time.Now()
	c.mustDC(5*time.Minute, "up", "-d", "--scale", "scheduler=1", "--scale", fmt.Sprintf("agent=%d", agents))
	c.waitHealthy(composeServices+agents, 3*time.Minute)
	c.fetchKubeconfig()
	c.waitNodes(agents, time.Minute)
	healthy = time.Since(start)
	t.Logf("FIGURE up -> all %d containers healthy and %d nodes Ready: %s", composeServices+agents, agents, healthy.Round(100*time.Millisecond))
	return c, healthy, downDone
}

func TestCompose(t *testing.T) {
	// 1. Up: 3 NATS nodes, admission, store, binder, status, namespaces, nodelifecycle, controllers, workloads,
	// auditseal, one scheduler, 5 agents.
	c, healthy, downDone := startCompose(t, composeAgents)
	c.checkReplicas()
	c.checkNATSAuth()

	// 2. 300 pods with one scheduler.
	rate1 := c.batch("b1")
	t.Logf("FIGURE batch 1 (1 scheduler): %d pods Ready at %.0f pods/s", composeBatch, rate1)

	// 3. Three schedulers, 300 more. Every scale is repeated: `up` converges each service to the given scale.
	c.mustDC(5*time.Minute, "up", "-d", "--scale", "scheduler=3", "--scale", fmt.Sprintf("agent=%d", composeAgents))
	c.waitHealthy(composeServices+2+composeAgents, 2*time.Minute)
	rate3 := c.batch("b2")
	t.Logf("FIGURE batch 2 (3 schedulers): %d pods Ready at %.0f pods/s", composeBatch, rate3)

	// 4. A third batch while one NATS node and one scheduler stop (SIGTERM; both must exit 0).
	file := manifest(t, "b3", composeBatch)
	start := time.Now()
	var wg sync.WaitGroup
	var attempts int
	wg.Add(1)
	go func() { defer wg.Done(); attempts = c.applyQuiet(file) }()
	c.waitPods("batch%3Db3", 30, false, time.Minute)
	var sched string
	for id := range c.containers("scheduler") {
		sched = id
		break
	}
	var nats string
	for id := range c.containers("n1") {
		nats = id
	}
	stopStart := time.Now()
	var sw sync.WaitGroup
	for _, id := range []string{nats, sched} {
		sw.Add(1)
		go func() { defer sw.Done(); c.must(time.Minute, "docker", "stop", "-t", "20", id) }()
	}
	sw.Wait()
	t.Logf("stopped NATS n1 and scheduler %.12s in %s, %s after the third apply started", sched, time.Since(stopStart).Round(100*time.Millisecond), stopStart.Sub(start).Round(100*time.Millisecond))
	for _, id := range []string{nats, sched} {
		if got := c.exitCode(id); got != "exited 0" {
			t.Errorf("container %.12s after SIGTERM: %s, want exited 0", id, got)
		}
	}
	wg.Wait()
	if attempts < 0 {
		t.Fatalf("kubectl apply of batch 3 never succeeded")
	}
	c.waitPods("batch%3Db3", composeBatch, true, 3*time.Minute)
	t.Logf("FIGURE batch 3 (n1 and a scheduler stopped mid-batch): %d pods Ready at %.0f pods/s, kubectl apply attempts %d", composeBatch, composeBatch/time.Since(start).Seconds(), attempts)
	if logs, err := c.dc(time.Minute, "logs", "--no-color", "admission"); err == nil {
		t.Logf("creates whose store answer was lost, answered from the bucket: %d", strings.Count(logs, "the store's answer to a create did not come"))
		if attempts > 1 {
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "no answer from the store") {
					t.Logf("%s", l)
				}
			}
			c.keepLogs("batch3")
		}
	}

	// 5. Invariants, through the API and on the bus.
	c.checkPods(3 * composeBatch)
	c.checkBus()

	// Restarts are logged for the record: services resume a failed pull themselves, so none is expected.
	for id, st := range c.containers("") {
		if n := strings.TrimSpace(c.must(30*time.Second, "docker", "inspect", "-f", "{{.RestartCount}}", id)); n != "0" {
			t.Logf("container %.12s (%s) restarted %s times", id, st, n)
		}
	}

	// 6. Graceful stop of everything (exit 0 each), then down -v leaves nothing behind.
	c.mustDC(3*time.Minute, "stop", "-t", "20")
	for id, st := range c.containers("") {
		if got := c.exitCode(id); got != "exited 0" {
			t.Errorf("container %.12s (%s) after stop: %s, want exited 0", id, st, got)
		}
	}
	c.mustDC(3*time.Minute, "down", "-v", "--remove-orphans")
	*downDone = true
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("left behind after down -v: %v", left)
	}
	t.Logf("FIGURES: healthy after %s; 1 scheduler %.0f pods/s; 3 schedulers %.0f pods/s", healthy.Round(100*time.Millisecond), rate1, rate3)
}

// fetchKubeconfig copies the admin kubeconfig out of the admission container, as the README says, and
// checks that the API serves TLS with its CA and refuses a request without credentials.
func (c *composeEnv) fetchKubeconfig() {
	c.t.Helper()
	id := strings.TrimSpace(c.mustDC(time.Minute, "ps", "-q", "admission"))
	c.must(time.Minute, "docker", "cp", id+":/var/lib/podbus/kubeconfig", c.kube.kubeconfig)
	k, err := pki.LoadKubeconfig(c.kube.kubeconfig)
	if err != nil {
		c.t.Fatal(err)
	}
	if k.Server != c.api || len(k.CA) == 0 || len(k.ClientCert) == 0 {
		c.t.Fatalf("kubeconfig: server %s, %d bytes of CA, %d of client certificate; want %s with both", k.Server, len(k.CA), len(k.ClientCert), c.api)
	}
	rt, err := k.Transport(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	c.client = &http.Client{Transport: rt}
	anon, err := pki.Kubeconfig{CA: k.CA}.Transport(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: anon, Timeout: 30 * time.Second}).Get(c.api + "/api/v1/nodes")
	if err != nil {
		c.t.Fatalf("GET /api/v1/nodes with the CA alone: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		c.t.Errorf("GET /api/v1/nodes without credentials: %s, want 401", resp.Status)
	}
}

// keepLogs writes every service's log to a file in $PODBUS_KEEP_LOGS (default: the temporary
// directory), for a run that did something worth reading afterwards but did not fail.
func (c *composeEnv) keepLogs(what string) {
	c.t.Helper()
	out, err := c.dc(2*time.Minute, "logs", "--no-color", "--timestamps")
	if err != nil {
		c.t.Logf("docker-compose logs: %v", err)
		return
	}
	dir := os.Getenv("PODBUS_KEEP_LOGS")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("podbus-compose-%s-%s.log", what, time.Now().UTC().Format("20060102T150405")))
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		c.t.Logf("keep the services' logs: %v", err)
		return
	}
	c.t.Logf("the services' logs are kept in %s", path)
}

// applyQuiet is apply for a goroutine: it reports failure as -1 instead of calling Fatal.
func (c *composeEnv) applyQuiet(file string) int {
	for attempt := 1; attempt <= 5; attempt++ {
		out, err := c.kube.runFor(composeApplyLimit, "apply", "-f", file)
		if err == nil {
			return attempt
		}
		c.t.Logf("kubectl apply attempt %d: %v: %s", attempt, err, lastLines(out, 3))
		time.Sleep(time.Second)
	}
	return -1
}

// waitNodes waits until want nodes are Ready through the API.
func (c *composeEnv) waitNodes(want int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var list corev1.NodeList
		err := c.getJSON("/api/v1/nodes", &list)
		n := 0
		for _, node := range list.Items {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					n++
				}
			}
		}
		if err == nil && n >= want {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %s: %d of %d nodes Ready (%v)", timeout, n, want, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkPods: every pod Ready on exactly one node (its nodeName, and the node of every Scheduled event),
// and no node's summed requests above its allocatable, read through kubectl.
func (c *composeEnv) checkPods(want int) {
	t := c.t
	t.Helper()
	var pods corev1.PodList
	if err := json.Unmarshal([]byte(c.kube.must("get", "pods", "-o", "json")), &pods); err != nil {
		t.Fatal(err)
	}
	var nodes corev1.NodeList
	if err := json.Unmarshal([]byte(c.kube.must("get", "nodes", "-o", "json")), &nodes); err != nil {
		t.Fatal(err)
	}
	var events corev1.EventList
	if err := json.Unmarshal([]byte(c.kube.must("get", "events", "-o", "json")), &events); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != want {
		t.Errorf("%d pods, want %d", len(pods.Items), want)
	}
	scheduledOn := map[string]map[string]bool{} // pod -> nodes named by its Scheduled events
	for _, e := range events.Items {
		if e.Reason != "Scheduled" {
			continue
		}
		_, node, ok := strings.Cut(e.Message, " to ")
		if !ok {
			t.Errorf("Scheduled event without a node: %q", e.Message)
			continue
		}
		if scheduledOn[e.InvolvedObject.Name] == nil {
			scheduledOn[e.InvolvedObject.Name] = map[string]bool{}
		}
		scheduledOn[e.InvolvedObject.Name][node] = true
	}
	type use struct {
		cpu, mem resource.Quantity
		pods     int64
	}
	used := map[string]*use{}
	perNode := map[string]int{}
	for i := range pods.Items {
		p := &pods.Items[i]
		node := p.Spec.NodeName
		if node == "" || !podReady(p) {
			t.Errorf("pod %s: node %q ready %v", p.Name, node, podReady(p))
			continue
		}
		if on := scheduledOn[p.Name]; len(on) != 1 || !on[node] {
			t.Errorf("pod %s on %s: Scheduled events name %v", p.Name, node, on)
		}
		u := used[node]
		if u == nil {
			u = &use{}
			used[node] = u
		}
		for _, ct := range p.Spec.Containers {
			u.cpu.Add(ct.Resources.Requests[corev1.ResourceCPU])
			u.mem.Add(ct.Resources.Requests[corev1.ResourceMemory])
		}
		u.pods++
		perNode[node]++
	}
	for _, n := range nodes.Items {
		u := used[n.Name]
		if u == nil {
			continue
		}
		a := n.Status.Allocatable
		if u.cpu.Cmp(a[corev1.ResourceCPU]) > 0 || u.mem.Cmp(a[corev1.ResourceMemory]) > 0 || u.pods > a.Pods().Value() {
			t.Errorf("node %s overcommitted: cpu %s mem %s pods %d, allocatable %v", n.Name, u.cpu.String(), u.mem.String(), u.pods, a)
		}
		delete(used, n.Name)
	}
	for n := range used {
		t.Errorf("pods bound to %s, which is not a node", n)
	}
	var spread []string
	for n, k := range perNode {
		spread = append(spread, fmt.Sprintf("%.6s:%d", n, k))
	}
	sort.Strings(spread)
	t.Logf("%d pods Ready, each on one node, no node overcommitted; pods per node %v", len(pods.Items), spread)
}

// addr is a container's address on the project's network (reachable from the docker host), or "".
func (c *composeEnv) addr(id string) string {
	c.t.Helper()
	ip := strings.Fields(c.must(30*time.Second, "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", id))
	if len(ip) == 0 {
		return ""
	}
	return ip[0]
}

// natsURL is a client URL of the project's running NATS nodes, by container address (reachable from
// the docker host), for the checks on streams and buckets.
func (c *composeEnv) natsURL() string {
	c.t.Helper()
	var urls []string
	for _, svc := range []string{"n1", "n2", "n3"} {
		for id, st := range c.containers(svc) {
			if !strings.Contains(st, " Up ") {
				continue
			}
			if ip := c.addr(id); ip != "" {
				urls = append(urls, "nats://"+ip+":4222")
			}
		}
	}
	if len(urls) == 0 {
		c.t.Fatal("no running NATS node")
	}
	return strings.Join(urls, ",")
}

// natsConn connects without provisioning (bustest.Conn would provision R1 and scale the streams down).
func (c *composeEnv) natsConn() *bus.Conn {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, c.natsURL(), "compose-test", c.natsAdmin()...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(conn.NC.Close)
	return conn
}

// natsAdmin are the options of the admin's NATS credential, copied out of the provision container, and
// of TLS with the servers' CA. The servers share one certificate for n1, n2 and n3; the test dials them
// by address, so it names one of those.
func (c *composeEnv) natsAdmin() []nats.Option {
	c.t.Helper()
	dir := c.t.TempDir()
	for id := range c.containers("provision") {
		c.must(time.Minute, "docker", "cp", id+":/creds/admin.creds", filepath.Join(dir, "admin.creds"))
		c.must(time.Minute, "docker", "cp", id+":/creds/ca.crt", filepath.Join(dir, "ca.crt"))
		break
	}
	opts, _, err := natsauth.ClientOptions(filepath.Join(dir, "admin.creds"), "")
	if err != nil {
		c.t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		c.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		c.t.Fatal("no CA certificate in the provision container's ca.crt")
	}
	return append(opts, nats.Secure(&tls.Config{RootCAs: pool, ServerName: "n1", MinVersion: tls.VersionTLS12}))
}

// checkNATSAuth: the NATS servers refuse a client without a credential, and one without TLS.
func (c *composeEnv) checkNATSAuth() {
	c.t.Helper()
	url := c.natsURL()
	admin := c.natsAdmin()
	secure := admin[len(admin)-1]
	if nc, err := nats.Connect(url, secure, nats.NoReconnect()); err == nil {
		nc.Close()
		c.t.Error("NATS let a client in without a credential")
	}
	if nc, err := nats.Connect(url, append(admin[:len(admin)-1:len(admin)-1], nats.NoReconnect())...); err == nil {
		nc.Close()
		c.t.Error("NATS let a client in without TLS")
	}
}

// checkReplicas: every podbus stream (KV buckets are streams too) has 3 replicas, all current.
func (c *composeEnv) checkReplicas() {
	t := c.t
	t.Helper()
	infos := c.streamInfos()
	for _, info := range infos {
		name := info.Config.Name
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: %d replicas, cluster %+v", name, info.Config.Replicas, info.Cluster)
		}
		// A direct get may be answered by a lagging follower: buckets must read from the leader.
		if strings.HasPrefix(name, "KV_") && info.Config.AllowDirect {
			t.Errorf("bucket stream %s allows direct gets (stale reads)", name)
		}
	}
	if n := len(infos); n < len(bus.StreamConfigs(bus.Options{}))+len(bus.KVConfigs(bus.Options{})) {
		t.Errorf("only %d streams", n)
	}
	t.Logf("%d streams and buckets, each with 3 replicas; buckets read from their leader", len(infos))
}

// streamInfos reads the info of every stream of the cluster (KV buckets are streams too).
func (c *composeEnv) streamInfos() []*jetstream.StreamInfo {
	t := c.t
	t.Helper()
	conn := c.natsConn()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []*jetstream.StreamInfo
	names := conn.JS.StreamNames(ctx)
	for name := range names.Name() {
		s, err := conn.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, info)
	}
	if names.Err() != nil {
		t.Fatal(names.Err())
	}
	return out
}

// checkBus: the pipeline's own invariants on the R3 streams (no pod announced to two nodes, allocations
// agree with bindings, no node over its allocatable), from the e2e helpers.
func (c *composeEnv) checkBus() {
	c.t.Helper()
	conn := c.natsConn()
	checkInvariants(c.t, conn)
	if !c.t.Failed() {
		c.t.Log("bus invariants hold: no pod announced to two nodes, allocations match bindings, no node overcommitted")
	}
}
