package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/cluster/up"
)

// needChromium returns the path of a Chromium to drive; it skips without one, but fails in CI, where
// .ci/run installs Debian's chromium.
func needChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is required in CI")
	}
	t.Skip("browser test skipped: chromium not installed (apt-get install chromium)")
	return ""
}

// kubectlProxy runs `kubectl proxy` on a free port and returns its URL: the browser reaches the API
// through it as the kubeconfig's user, as a person would.
func kubectlProxy(t *testing.T, kubeconfig string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, kubectlBin, "--kubeconfig", kubeconfig, "proxy", "--port=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("kubectl proxy: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Starting to serve on "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("kubectl proxy did not say where it serves")
		return ""
	}
}

// artifactDir is where the test leaves its screenshots: $PODBUS_ARTIFACTS when set, else the test's
// artifact directory (kept with go test -artifacts).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := t.ArtifactDir()
	if d := os.Getenv("PODBUS_ARTIFACTS"); d != "" {
		dir = filepath.Join(d, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// The web view in a real browser: headless Chromium opens /ui/ through kubectl proxy (so through
// authentication and RBAC), 200 pods are created with kubectl, and the page's pipeline, updated by
// server-sent events alone, counts 200 Ready; a pod's page then draws every stage of its timeline.
func TestWebViewInBrowser(t *testing.T) {
	needKubectl(t)
	chromium := needChromium(t)
	cl, _ := startCluster(t, up.Config{Nodes: 4, NATSAuth: true, RegistryAddr: "off"})
	proxy := kubectlProxy(t, cl.Kubeconfig)
	dir := artifactDir(t)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1400, 1100))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 150*time.Second)
	defer cancelTimeout()

	if err := chromedp.Do(ctx, chromedp.Navigate(proxy+"/ui/"), chromedp.WaitVisible("#stage-ready .count")); err != nil {
		t.Fatalf("open the view: %v", err)
	}
	count := func(stage string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector("#stage-%s .count").textContent`, stage)))
		if err != nil {
			t.Fatalf("read the %s count: %v", stage, err)
		}
		return s
	}
	if got := count("ready"); got != "0" {
		t.Fatalf("ready count %s before any pod", got)
	}

	// kubectl throttles its own requests: several of them share the 200 pods.
	const n, procs = 200, 4
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	errs := make(chan error, procs)
	start := time.Now()
	for p := range procs {
		var yaml strings.Builder
		for i := p; i < n; i += procs {
			fmt.Fprintf(&yaml, "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: wv-%03d\nspec:\n  containers:\n  - name: app\n    image: example.local/web:1\n    resources:\n      requests: {cpu: 10m, memory: 16Mi}\n", i)
		}
		file := writeFile(t, fmt.Sprintf("pods-%d.yaml", p), yaml.String())
		go func() {
			out, err := k.runFor(90*time.Second, "create", "-f", file)
			if err != nil {
				err = fmt.Errorf("kubectl create: %w\n%s", err, out)
			}
			errs <- err
		}()
	}
	for range procs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("kubectl created %d pods in %s", n, time.Since(start).Round(time.Millisecond))

	// The page is never reloaded: the counts move with the stream.
	deadline := time.Now().Add(60 * time.Second)
	for count("ready") != fmt.Sprint(n) {
		if time.Now().After(deadline) {
			t.Fatalf("the view counts %s ready pods, want %d (admitted %s, bound %s, running %s)",
				count("ready"), n, count("admitted"), count("bound"), count("running"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the view counts %d ready pods %s after kubectl began", n, time.Since(start).Round(time.Millisecond))
	dots, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#nodes .node .dot.s-ready").length`))
	if err != nil || dots != n {
		t.Errorf("the node grids draw %d ready pods (%v), want %d", dots, err, n)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "webview.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}

	// A pod's page: its Gantt chart, read from the audit log, has a bar for every stage.
	if err := chromedp.Do(ctx, chromedp.Navigate(proxy+"/ui/pods/default/wv-007")); err != nil {
		t.Fatalf("open a pod's page: %v", err)
	}
	var stages []string
	deadline = time.Now().Add(20 * time.Second)
	for {
		stages, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(".gantt .row.ok"), r => r.dataset.stage)`))
		if err == nil && slices.Equal(stages, audit.SeedStages) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the timeline shows stages %v (%v), want %v", stages, err, audit.SeedStages)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if shot, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "webview-pod.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}
