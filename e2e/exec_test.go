package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	"github.com/podbus/podbus/internal/pki"
)

// TestContainerdExec drives kubectl exec, exec -i, exec -it, attach (-i, -it) and port-forward through the API
// and NATS to a real pod, with the default kubectl (WebSocket) and an SPDY-era one (1.29), and checks
// that a user bound to view is refused both.
func TestContainerdExec(t *testing.T) {
	needContainerd(t)
	reg := builtinRegistry(t)
	n := newRealNode(t)
	dataDir := t.TempDir()
	cl, conn := startCluster(t, up.Config{Nodes: 0, DataDir: dataDir})
	n.startAgent(t, cl.NATSURL)
	admin := kube{t: t, kubeconfig: cl.Kubeconfig}
	bustest.Eventually(t, 30*time.Second, func() bool {
		out, _ := admin.run("get", "nodes")
		return strings.Contains(out, " Ready ")
	}, "the real node Ready")
	admin.must("apply", "-f", writeFile(t, "pods.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
%[1]s  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: %[2]s/podbus/demo-web:latest
    readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: box}
spec:
%[1]s  terminationGracePeriodSeconds: 1
  containers:
  - name: box
    image: %[2]s/podbus/busybox:latest
    command: ["sh", "-c", "while true; do echo tick; sleep 1; done"]
---
apiVersion: v1
kind: Pod
metadata: {name: in}
spec:
%[1]s  terminationGracePeriodSeconds: 1
  containers:
  - name: in
    image: %[2]s/podbus/busybox:latest
    command: ["sh", "-c", "read line; echo got:$line; exec sleep 3600"]
    stdin: true
    stdinOnce: true
---
apiVersion: v1
kind: Pod
metadata: {name: tin}
spec:
%[1]s  terminationGracePeriodSeconds: 1
  containers:
  - name: tin
    image: %[2]s/podbus/busybox:latest
    command: ["sh", "-c", "read line; test -t 0 && echo tty-got:$line; exec sleep 3600"]
    stdin: true
    stdinOnce: true
    tty: true
`, pinned(n.name), reg)))
	for _, name := range []string{"web", "box", "in", "tin"} {
		waitPod(t, conn, name, 60*time.Second, "Ready", isReady)
	}

	kubectls := []kube{admin}
	old := kube{t: t, kubeconfig: cl.Kubeconfig, bin: filepath.Join(kubectlMinorsDir, "kubectl.1.29")}
	if _, err := os.Stat(old.bin); err == nil {
		kubectls = append(kubectls, old)
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("kubectl 1.29 is required in CI: %v", err)
	}
	for _, k := range kubectls {
		t.Run(filepath.Base(k.path()), func(t *testing.T) {
			k.t = t
			// The command's exit code is kubectl's; stdout and stderr both come back.
			start := time.Now()
			out, err := k.run("exec", "box", "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3")
			t.Logf("kubectl exec, start to exit: %s", time.Since(start).Round(time.Millisecond))
			if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 3 ||
				!strings.Contains(out, "to-stdout") || !strings.Contains(out, "to-stderr") {
				t.Errorf("exec exit 3: %v\n%s", err, out)
			}
			// Piped stdin reaches the command, and its end too (sed ends only then).
			out, err = kubectlStdin(k, "hello\nworld\n", "exec", "-i", "box", "--", "sed", "s/o/0/g")
			if err != nil || out != "hell0\nw0rld\n" {
				t.Errorf("exec -i: %v\n%q", err, out)
			}
			// A terminal: kubectl runs under script(1)'s pty; the shell sees a tty and its exit is kubectl's.
			if _, err := exec.LookPath("script"); err == nil {
				line := fmt.Sprintf("%s --kubeconfig %s exec -it box -- sh", k.path(), k.kubeconfig)
				out, err := commandStdin(t, "test -t 0 && echo tty-$((6*7)); exit 7\n", "script", "-qec", line, "/dev/null")
				if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 7 || !strings.Contains(out, "tty-42") {
					t.Errorf("exec -it: %v\n%q", err, out)
				}
			}
			// attach follows the main process's output.
			out, _ = k.runFor(4*time.Second, "attach", "box")
			if !strings.Contains(out, "tick") {
				t.Errorf("attach: %q", out)
			}
			// port-forward serves demo-web's page on a local port.
			addr, stop := portForward(t, k, "pod/web", 8080)
			defer stop()
			for i := range 2 { // a second connection through the same forward
				start := time.Now()
				body, err := fetch("http://" + addr + "/")
				t.Logf("GET through port-forward (%d): %s", i, time.Since(start).Round(time.Millisecond))
				if err != nil || !strings.HasPrefix(body, "hello from ") {
					t.Errorf("GET through port-forward (%d): %q, %v", i, body, err)
				}
			}
		})
	}

	// attach -i writes to the main process's stdin (stdinOnce closes it after the first attach).
	attachAnswers(t, admin, "in", "got:hello", admin.path(), []string{"--kubeconfig", admin.kubeconfig, "attach", "-i", "in"},
		func(chan struct{}) io.Reader { return strings.NewReader("hello\n") })
	// attach -it under script(1)'s pty. Its stdin stays open until the container has answered: at its
	// end script hangs up kubectl, and stdinOnce then hangs up the container's console, as in kube.
	if _, err := exec.LookPath("script"); err == nil {
		line := fmt.Sprintf("%s --kubeconfig %s attach -it tin", admin.path(), admin.kubeconfig)
		attachAnswers(t, admin, "tin", "tty-got:hi", "script", []string{"-qec", line, "/dev/null"},
			func(answered chan struct{}) io.Reader {
				return io.MultiReader(strings.NewReader("hi\n"), eofAfter(answered))
			})
	}

	// A user bound to view may read the pods but neither exec nor port-forward.
	bob := userKube(t, cl, dataDir, "bob")
	admin.must("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob")
	bustest.Eventually(t, 15*time.Second, func() bool {
		_, err := bob.run("get", "pod", "box")
		return err == nil
	}, "bob reads pods")
	out, err := bob.run("exec", "box", "--", "true")
	if err == nil || !strings.Contains(out, `User "bob" cannot create resource "pods/exec" in API group "" in the namespace "default"`) {
		t.Errorf("exec as a viewer: %v\n%s", err, out)
	}
	out, err = bob.runFor(20*time.Second, "port-forward", "pod/web", ":8080")
	if err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("port-forward as a viewer: %v\n%s", err, out)
	}
	if out, _ := bob.run("auth", "can-i", "create", "pods/exec"); strings.TrimSpace(out) != "no" {
		t.Errorf("auth can-i create pods/exec as a viewer: %q", out)
	}
}

// userKube is kubectl as user name, with a client certificate of the cluster's CA.
func userKube(t *testing.T, cl *up.Cluster, dataDir, name string) kube {
	t.Helper()
	adminCfg, err := pki.LoadKubeconfig(cl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.Open(filepath.Join(dataDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Client(name, name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := pki.WriteKubeconfig(path, "podbus", pki.Kubeconfig{Server: cl.APIURL, CA: adminCfg.CA, ClientCert: certPEM, ClientKey: keyPEM}); err != nil {
		t.Fatal(err)
	}
	return kube{t: t, kubeconfig: path}
}

// kubectlStdin runs kubectl with stdin; stdout only comes back.
func kubectlStdin(k kube, stdin string, args ...string) (string, error) {
	k.t.Helper()
	return commandStdin(k.t, stdin, k.path(), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
}

func commandStdin(t *testing.T, stdin, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && stderr.Len() > 0 {
		t.Logf("%s stderr: %s", name, stderr.String())
	}
	return string(out), err
}

var forwardingRE = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)

// portForward runs kubectl port-forward to a local port of its choice until stop.
func portForward(t *testing.T, k kube, target string, port int) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, k.path(), "--kubeconfig", k.kubeconfig, "port-forward", target, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kubectl port-forward stderr: %s", stderr.String())
		}
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwardingRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- "127.0.0.1:" + m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr = <-found:
		return addr, stop
	case <-time.After(30 * time.Second):
		stop()
		t.Fatalf("kubectl port-forward %s printed no local port", target)
		return "", nil
	}
}

// eofAfter is a reader that ends when done is closed.
type eofAfter chan struct{}

func (e eofAfter) Read([]byte) (int, error) {
	<-e
	return 0, io.EOF
}

// attachAnswers runs name args (a kubectl attach to pod) with stdin(answered) until pod's log shows want,
// then stops it: the attach itself lasts as long as the container.
func attachAnswers(t *testing.T, k kube, pod, want, name string, args []string, stdin func(answered chan struct{}) io.Reader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	answered := make(chan struct{})
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = stdin(answered)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs string
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs, want) && time.Now().Before(deadline) {
		logs, _ = k.run("logs", pod)
		time.Sleep(500 * time.Millisecond)
	}
	close(answered)
	cancel()
	_ = cmd.Wait()
	if !strings.Contains(logs, want) {
		t.Errorf("%s %s: no %q in the log of %s: %q; it printed %q", name, strings.Join(args, " "), want, pod, logs, out.String())
	}
}
