package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsWarmup(t *testing.T) {
	// A kubeconfig names the target cluster as --api does.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		want    int
		wantErr string
	}{
		{[]string{}, 0, ""},
		{[]string{"--warmup-pods", "5000"}, 5000, ""},
		{[]string{"--warmup-pods", "-1"}, 0, "a count of pods"},
		{[]string{"--warmup-pods", "10", "--scenario", "envelope"}, 0, "only the pipeline"},
		{[]string{"--warmup-pods", "10", "--api", "https://127.0.0.1:6443", "--nats", "nats://127.0.0.1:4222"}, 0, "only the pipeline"},
		{[]string{"--warmup-pods", "10", "--runtime", "containerd"}, 0, "only the pipeline"},
		{[]string{"--warmup-pods", "10", "--kubeconfig", kubeconfig, "--nats", "nats://127.0.0.1:4222"}, 0, "only the pipeline"},
	}
	for _, tc := range tests {
		c, err := ParseFlags(tc.args)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if c.WarmupPods != tc.want {
			t.Errorf("%v: WarmupPods %d, want %d", tc.args, c.WarmupPods, tc.want)
		}
	}
}

// A warmed-up run measures only its own pods, on a cluster of its own, and says that it was warmed up.
func TestRunWarmup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded clusters: skipped under -short")
	}
	const pods, warm = 30, 40
	cfg, err := ParseFlags([]string{"--nodes", "3", "--pods", "30", "--warmup-pods", "40", "--concurrency", "4",
		"--quiet", "--memory-streams", "--no-audit", "--data-dir", t.TempDir(), "--timeout", "2m", "--json"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, cfg, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("the result does not parse: %v\n%s", err, out.String())
	}
	if res.WarmupPods != warm {
		t.Errorf("warmup_pods %d, want %d", res.WarmupPods, warm)
	}
	if res.Pods != pods || res.Ready != pods {
		t.Errorf("measured %d pods, %d ready; want %d of %d", res.Pods, res.Ready, pods, pods)
	}
	if got := res.Stages[StageReady].Count; got != pods {
		t.Errorf("%d ready latencies, want %d: the warm-up's pods were counted", got, pods)
	}
}
