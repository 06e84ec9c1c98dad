package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/cluster/up"
)

const kubectlBin = "/usr/bin/kubectl"

// needKubectl skips on a machine without kubectl, but fails in CI, where it must be there.
func needKubectl(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(kubectlBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubectl is required in CI: %v", err)
		}
		t.Skipf("kubectl not installed (%v)", err)
	}
}

type kube struct {
	t          *testing.T
	kubeconfig string
	bin        string // the kubectl to run; kubectlBin when empty
}

func (k kube) path() string {
	if k.bin == "" {
		return kubectlBin
	}
	return k.bin
}

func (k kube) run(args ...string) (string, error) {
	k.t.Helper()
	return k.runFor(60*time.Second, args...)
}

// runFor is run with a longer limit, for applies of hundreds of objects one request after another.
func (k kube) runFor(limit time.Duration, args ...string) (string, error) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.path(), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (k kube) must(args ...string) string {
	k.t.Helper()
	out, err := k.run(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const webPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: web
    image: example.local/web:1
    resources:
      requests: {cpu: 100m, memory: 64Mi}
`

// The real kubectl drives podbus through every command a user needs for pods.
func TestKubectlEndToEnd(t *testing.T) {
	needKubectl(t)
	cl, _ := startCluster(t, up.Config{Nodes: 2, StartDelay: 50 * time.Millisecond})
	kubectlSuite(t, kubectlBin, cl.Kubeconfig)
}

// kubectlSuite runs the kubectl at bin through the pod commands against the podbus of kubeconfig. It uses
// the pods web and api in the default namespace and leaves no pod behind when it passes.
func kubectlSuite(t *testing.T, bin, kubeconfig string) {
	k := kube{t: t, kubeconfig: kubeconfig, bin: bin}

	if out := k.must("version"); !strings.Contains(out, "v1.32") {
		t.Errorf("version: %s", out)
	}
	if out := k.must("get", "nodes"); !strings.Contains(out, "node-1") || !strings.Contains(out, "Ready") {
		t.Errorf("get nodes:\n%s", out)
	}

	// Watch from before the pod exists: it must show the pod going to Running 1/1.
	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	watch := exec.CommandContext(wctx, bin, "--kubeconfig", kubeconfig, "get", "pods", "-w")
	stdout, _ := watch.StdoutPipe()
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	sawRunning := make(chan []string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "web" && f[1] == "1/1" && f[2] == "Running" {
				sawRunning <- lines
				return
			}
		}
		sawRunning <- lines
	}()

	manifest := writeFile(t, "web.yaml", webPod)
	if out := k.must("apply", "-f", manifest); !strings.Contains(out, "pod/web created") {
		t.Errorf("apply: %s", out)
	}
	k.must("wait", "--for=condition=Ready", "pod/web", "--timeout=60s")
	select {
	case lines := <-sawRunning:
		if len(lines) == 0 || !strings.Contains(strings.Join(lines, "\n"), "Running") {
			t.Errorf("get pods -w never showed web Running 1/1:\n%s", strings.Join(lines, "\n"))
		}
	case <-wctx.Done():
		t.Error("get pods -w timed out")
	}
	wcancel()
	_ = watch.Wait()

	// Repeated apply: unchanged, then a label change (strategic merge patch).
	if out := k.must("apply", "-f", manifest); !strings.Contains(out, "unchanged") {
		t.Errorf("second apply: %s", out)
	}
	changed := writeFile(t, "web2.yaml", strings.Replace(webPod, "app: web", "app: web\n    tier: front", 1))
	if out := k.must("apply", "-f", changed); !strings.Contains(out, "configured") {
		t.Errorf("apply with change: %s", out)
	}
	if out := k.must("get", "pod", "web", "-o", "jsonpath={.metadata.labels.tier}"); out != "front" {
		t.Errorf("label after apply = %q", out)
	}
	// Pods are mostly immutable: changing resources is refused with Kubernetes' message.
	immutable := writeFile(t, "web3.yaml", strings.Replace(webPod, "cpu: 100m", "cpu: 200m", 1))
	if out, err := k.run("apply", "-f", immutable); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("changing resources should be forbidden: %v\n%s", err, out)
	}

	wide := k.must("get", "pods", "-o", "wide")
	if !strings.Contains(wide, "10.42.") || !strings.Contains(wide, "node-") {
		t.Errorf("get pods -o wide lacks IP or node:\n%s", wide)
	}
	if out := k.must("get", "pod", "web", "-o", "yaml"); !strings.Contains(out, "podIP: 10.42.") || !strings.Contains(out, "resourceVersion:") {
		t.Errorf("-o yaml:\n%s", out)
	}
	if out := k.must("get", "pod", "web", "-o", "jsonpath={.status.phase}"); out != "Running" {
		t.Errorf("jsonpath phase = %q", out)
	}
	if out := k.must("get", "pods", "-A"); !strings.Contains(out, "default") || !strings.Contains(out, "web") {
		t.Errorf("get pods -A:\n%s", out)
	}
	if out := k.must("get", "pods", "-l", "app=web", "--field-selector", "status.phase=Running", "-o", "name"); strings.TrimSpace(out) != "pod/web" {
		t.Errorf("selectors: %q", out)
	}
	if out := k.must("get", "events"); !strings.Contains(out, "Scheduled") || !strings.Contains(out, "Started") {
		t.Errorf("get events:\n%s", out)
	}
	desc := k.must("describe", "pod", "web")
	for _, want := range []string{"Status:", "Running", "IP:", "Node:", "Conditions:", "Ready", "Events:", "Scheduled", "Successfully assigned default/web"} {
		if !strings.Contains(desc, want) {
			t.Errorf("describe lacks %q:\n%s", want, desc)
		}
	}

	// create -f: a second pod, and a duplicate refused.
	other := writeFile(t, "api.yaml", strings.ReplaceAll(webPod, "web", "api"))
	if out := k.must("create", "-f", other); !strings.Contains(out, "pod/api created") {
		t.Errorf("create: %s", out)
	}
	if out, err := k.run("create", "-f", other); err == nil || !strings.Contains(out, "AlreadyExists") {
		t.Errorf("duplicate create: %v %s", err, out)
	}
	// Server-side field validation: kubectl sends fieldValidation=Strict and gets a 400.
	bad := writeFile(t, "bad.yaml", strings.Replace(webPod, "  containers:", "  bogusField: 1\n  containers:", 1))
	if out, err := k.run("apply", "-f", bad); err == nil || !strings.Contains(out, "unknown field") {
		t.Errorf("unknown field accepted: %v %s", err, out)
	}

	// delete waits until the pod is gone.
	if out := k.must("delete", "pod", "web", "--timeout=60s"); !strings.Contains(out, `pod "web" deleted`) {
		t.Errorf("delete: %s", out)
	}
	if out, err := k.run("get", "pod", "web"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("pod still there after delete: %v %s", err, out)
	}
	k.must("delete", "-f", other, "--timeout=60s")
	if out := k.must("get", "pods"); !strings.Contains(out, "No resources found") {
		t.Errorf("pods left:\n%s", out)
	}
}

// A namespace's lifecycle through the real kubectl: create it, run a pod in it, delete it; the namespace
// controller stops the pod, removes it and its other objects, then the namespace.
func TestKubectlNamespaces(t *testing.T) {
	needKubectl(t)
	cl, conn := startCluster(t, up.Config{Nodes: 1, StartDelay: 50 * time.Millisecond})
	kubectlNamespaces(t, kube{t: t, kubeconfig: cl.Kubeconfig}, conn, "team-a")
}

// kubectlNamespaces creates namespace ns with a pod and a configmap in it, then deletes the namespace
// and checks that kubectl waited until both were gone.
func kubectlNamespaces(t *testing.T, k kube, conn *bus.Conn, ns string) {
	t.Helper()
	if out := k.must("create", "namespace", ns); !strings.Contains(out, "namespace/"+ns+" created") {
		t.Errorf("create namespace: %s", out)
	}
	out := k.must("get", "ns")
	for _, want := range []string{"NAME", "STATUS", "AGE", ns, "Active", "kube-system"} {
		if !strings.Contains(out, want) {
			t.Errorf("get ns lacks %q:\n%s", want, out)
		}
	}
	k.must("run", "web", "-n", ns, "--image=example.local/web:1")
	k.must("create", "configmap", "conf", "-n", ns, "--from-literal=a=b")
	if out := k.must("get", "cm", "-n", ns); !strings.Contains(out, "DATA") || !strings.Contains(out, "conf") {
		t.Errorf("get cm:\n%s", out)
	}
	if out := k.must("describe", "cm", "conf", "-n", ns); !strings.Contains(out, "a:") {
		t.Errorf("describe cm:\n%s", out)
	}
	k.must("wait", "-n", ns, "--for=condition=Ready", "pod/web", "--timeout=60s")
	if out, err := k.run("run", "web", "-n", "missing", "--image=example.local/web:1"); err == nil || !strings.Contains(out, `namespaces "missing" not found`) {
		t.Errorf("pod in a missing namespace: %v %s", err, out)
	}

	// kubectl delete waits until the namespace is gone.
	if out := k.must("delete", "namespace", ns, "--timeout=90s"); !strings.Contains(out, `namespace "`+ns+`" deleted`) {
		t.Errorf("delete namespace: %s", out)
	}
	if out, err := k.run("get", "ns", ns); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("namespace still there: %v %s", err, out)
	}
	for key, p := range pods(t, conn) {
		if p.GetMetadata().GetNamespace() == ns {
			t.Errorf("pod %s left behind", key)
		}
	}
	if out := k.must("get", "cm", "-n", ns); !strings.Contains(out, "No resources found") {
		t.Errorf("configmaps left:\n%s", out)
	}
}
