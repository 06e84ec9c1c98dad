package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/freeport"
	"github.com/podbus/podbus/internal/pki"
)

// buildPodbus compiles cmd/podbus once per test binary run.
func buildPodbus(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "podbus")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/podbus")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type process struct {
	name string
	cmd  *exec.Cmd
	out  *bytes.Buffer
}

func spawn(t *testing.T, bin, name string, args ...string) *process {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{name: name, cmd: cmd, out: &out}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", name, out.String())
		}
	})
	return p
}

// stop sends SIGTERM and expects a clean exit: consumers drained, exit code 0.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s exited with %v", p.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop on SIGTERM", p.name)
		_ = p.cmd.Process.Kill()
	}
}

// sigkill kills the process without a goodbye (no drain, no acks, no unsubscribe) and reaps it.
func (p *process) sigkill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	err := p.cmd.Wait()
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("%s did not die of SIGKILL: %v", p.name, err)
	}
}

// waitReadyz waits until the process at base (http://host:port) answers /readyz with 200: it is
// connected and its consumers are bound, as compose's healthchecks wait before sending work.
func waitReadyz(t *testing.T, name, base string) {
	t.Helper()
	bustest.Eventually(t, 60*time.Second, func() bool {
		resp, err := healthClient.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "%s ready", name)
}

// Every service as its own podbus process over TCP to one NATS server gives the same result as `up`.
// Each serves /metrics on its health port, where the stages it completes counted every pod, and logs
// JSON lines with --log-format json.
func TestServicesAsSeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildPodbus(t)
	natsPort := freePort(t)
	apiPort := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(natsPort)
	nats := spawn(t, bin, "nats", "nats", "--port", strconv.Itoa(natsPort), "--store", t.TempDir())
	bustest.Eventually(t, 30*time.Second, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(natsPort))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "nats-server listening")

	// The API generates its CA, serving certificate and admin kubeconfig as kube-apiserver's --cert-dir.
	certDir, kubeconfig := t.TempDir(), filepath.Join(t.TempDir(), "kubeconfig")
	var procs []*process
	health := map[string]string{}
	for _, s := range []struct {
		name string
		args []string
	}{
		{"store", []string{"store"}},
		{"scheduler-a", []string{"scheduler", "--id", "sched-a"}},
		{"scheduler-b", []string{"scheduler", "--id", "sched-b"}},
		{"binder", []string{"binder"}},
		{"status", []string{"status"}},
		{"nodelifecycle", []string{"nodelifecycle", "--node-eviction-rate", "5"}},
		{"controllers", []string{"controllers"}},
		{"workloads", []string{"workloads"}},
		{"admission", []string{"admission", "--listen", "127.0.0.1:" + strconv.Itoa(apiPort), "--cert-dir", certDir, "--kubeconfig-out", kubeconfig}},
		{"agent-n1", []string{"agent", "--node", "n1", "--pod-cidr", "10.42.1.0/24", "--cpu", "4", "--memory", "8Gi"}},
		{"agent-n2", []string{"agent", "--node", "n2", "--pod-cidr", "10.42.2.0/24", "--cpu", "4", "--memory", "8Gi"}},
	} {
		health[s.name] = "127.0.0.1:" + strconv.Itoa(freePort(t))
		procs = append(procs, spawn(t, bin, s.name, append(s.args, "--nats", url, "--health-addr", health[s.name], "--log-format", "json")...))
	}
	api := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	client := &http.Client{Timeout: 10 * time.Second}
	bustest.Eventually(t, 60*time.Second, func() bool {
		if client.Transport == nil {
			kc, err := pki.LoadKubeconfig(kubeconfig)
			if err != nil {
				return false
			}
			if kc.Server != api {
				t.Fatalf("kubeconfig server %s, want %s", kc.Server, api)
			}
			if client.Transport, err = kc.Transport(nil); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := client.Get(api + "/api/v1/nodes")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list struct{ Items []json.RawMessage }
		return json.NewDecoder(resp.Body).Decode(&list) == nil && len(list.Items) == 2
	}, "API up with two nodes")
	// The API answers before the store's consumer is bound; a pod sent then waits for it.
	for _, p := range procs {
		waitReadyz(t, p.name, "http://"+health[p.name])
	}

	const n = 20
	for i := 0; i < n; i++ {
		if code, body := post(t, client, api, "default", podJSON("default", fmt.Sprintf("mp-%d", i), "100m", "64Mi")); code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, body)
		}
	}
	conn := bustest.Conn(t, url, "observer")
	all := waitAll(t, conn, n, 60*time.Second, isReady)
	nodes := map[string]int{}
	for _, p := range all {
		nodes[p.GetSpec().GetNodeName()]++
	}
	if len(nodes) != 2 {
		t.Errorf("pods spread over %v, want both nodes used", nodes)
	}
	checkInvariants(t, conn)

	// Each stage is counted by the processes that complete it; the ready stage right after the write
	// waitAll saw.
	stageOf := map[string][]string{"admission": {"admission"}, "store": {"store"}, "scheduling": {"scheduler-a", "scheduler-b"},
		"binding": {"binder"}, "node_start": {"agent-n1", "agent-n2"}, "ready": {"status"}}
	plain := &http.Client{Timeout: 10 * time.Second}
	for stage, names := range stageOf {
		bustest.Eventually(t, 10*time.Second, func() bool {
			var sum float64
			for _, name := range names {
				fams := scrapeMetrics(t, plain, "http://"+health[name]+"/metrics")
				sum += histogramCount(fams["podbus_pod_stage_duration_seconds"], map[string]string{"stage": stage})
			}
			return sum == n
		}, fmt.Sprintf("%s stage counted %d pods on %v", stage, n, names))
	}

	for _, p := range procs {
		p.stop(t)
	}
	nats.stop(t)
	for _, p := range procs {
		for _, line := range bytes.Split(bytes.TrimSpace(p.out.Bytes()), []byte("\n")) {
			if len(line) > 0 && !json.Valid(line) {
				t.Errorf("%s logged a line that is not JSON: %s", p.name, line)
				break
			}
		}
	}
}
