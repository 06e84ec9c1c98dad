package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/cluster/up"
)

// kubectlMinorsDir holds one kubectl per minor version; /usr/bin/kubectl runs the one matching the minor
// that the server's /version reports.
const kubectlMinorsDir = "/usr/lib/google-cloud-sdk/bin"

// kubectlMinors are the minors installed beside the dispatching kubectl.
var kubectlMinors = []int{27, 28, 29, 30, 31, 32, 33}

// Every installed kubectl minor, not only the one the dispatcher picks, drives podbus through the pod,
// namespace and configmap commands: users run kubectl releases from both sides of the version podbus claims.
func TestKubectlMinors(t *testing.T) {
	cl, conn := startCluster(t, up.Config{Nodes: 2, StartDelay: 50 * time.Millisecond})
	for _, minor := range kubectlMinors {
		t.Run(fmt.Sprintf("1.%d", minor), func(t *testing.T) {
			bin := filepath.Join(kubectlMinorsDir, fmt.Sprintf("kubectl.1.%d", minor))
			if _, err := os.Stat(bin); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("kubectl 1.%d is required in CI: %v", minor, err)
				}
				t.Skipf("kubectl 1.%d not installed (%v)", minor, err)
			}
			k := kube{t: t, kubeconfig: cl.Kubeconfig, bin: bin}
			// A subtest that stops half-way must not leave its pods to the next minor.
			t.Cleanup(func() {
				_, _ = k.run("delete", "pod", "web", "api", "extra", "--ignore-not-found", "--timeout=60s")
			})
			kubectlSuite(t, bin, cl.Kubeconfig)
			kubectlMore(t, k)
			kubectlNamespaces(t, k, conn, fmt.Sprintf("team-1-%d", minor))
		})
	}
}

// kubectlMore covers the commands kubectlSuite leaves out: discovery and OpenAPI (api-resources, explain),
// label, annotate, the three patch types and logs.
func kubectlMore(t *testing.T, k kube) {
	if out := k.must("api-resources"); !strings.Contains(out, "pods") || !strings.Contains(out, "po ") || !strings.Contains(out, "nodes") {
		t.Errorf("api-resources:\n%s", out)
	}
	if out := k.must("api-resources", "--namespaced=true", "-o", "name"); !strings.Contains(out, "pods") || strings.Contains(out, "nodes") {
		t.Errorf("api-resources --namespaced=true:\n%s", out)
	}
	if out := k.must("explain", "pod.spec.containers"); !strings.Contains(out, "containers") || !strings.Contains(out, "image") {
		t.Errorf("explain pod.spec.containers:\n%s", out)
	}
	if out := k.must("get", "nodes", "-o", "wide"); !strings.Contains(out, "node-1") || !strings.Contains(out, "INTERNAL-IP") {
		t.Errorf("get nodes -o wide:\n%s", out)
	}

	extra := writeFile(t, "extra.yaml", strings.ReplaceAll(webPod, "web", "extra"))
	if out := k.must("create", "-f", extra); !strings.Contains(out, "pod/extra created") {
		t.Errorf("create: %s", out)
	}
	k.must("wait", "--for=condition=Ready", "pod/extra", "--timeout=60s")
	if out := k.must("label", "pod", "extra", "tier=back"); !strings.Contains(out, "pod/extra labeled") {
		t.Errorf("label: %s", out)
	}
	if out := k.must("get", "pods", "-L", "tier"); !strings.Contains(out, "TIER") || !strings.Contains(out, "back") {
		t.Errorf("get -L tier:\n%s", out)
	}
	// kubectl 1.27 reports "pod/extra annotate".
	if out := k.must("annotate", "pod", "extra", "note=one"); !strings.Contains(out, "pod/extra annotate") {
		t.Errorf("annotate: %s", out)
	}
	for _, p := range []struct{ typ, patch, path, want string }{
		{"strategic", `{"metadata":{"labels":{"tier":"mid"}}}`, "{.metadata.labels.tier}", "mid"},
		{"merge", `{"metadata":{"annotations":{"note":"two"}}}`, "{.metadata.annotations.note}", "two"},
		{"json", `[{"op":"add","path":"/metadata/labels/patched","value":"json"}]`, "{.metadata.labels.patched}", "json"},
	} {
		if out := k.must("patch", "pod", "extra", "--type="+p.typ, "-p", p.patch); !strings.Contains(out, "pod/extra patched") {
			t.Errorf("patch --type=%s: %s", p.typ, out)
		}
		if out := k.must("get", "pod", "extra", "-o", "jsonpath="+p.path); out != p.want {
			t.Errorf("after patch --type=%s: %s = %q, want %q", p.typ, p.path, out, p.want)
		}
	}
	if out := k.must("logs", "extra"); !strings.Contains(out, "started") {
		t.Errorf("logs: %q", out)
	}
	if out := k.must("delete", "pod", "extra", "--timeout=60s"); !strings.Contains(out, `pod "extra" deleted`) {
		t.Errorf("delete: %s", out)
	}
}
