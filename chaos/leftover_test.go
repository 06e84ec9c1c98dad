package chaos

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/audit/check"
)

// A real node whose agent never removes a deleted pod's sandbox (--test-keep-sandboxes), without
// faults: the checker names the containers it left, by pod, on that node.
func TestChaosLeftoverCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the deployment for half a minute")
	}
	addr := realRuntime(t)
	if addr == "" {
		t.Skip("no real node on this machine")
	}
	bin := filepath.Join(t.TempDir(), "podbus")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/podbus").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var log strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Leftovers are known here, so that the run ends as soon as they are all that is left.
	rep, err := Run(ctx, Config{Bin: bin, Dir: t.TempDir(), Seed: 1, Duration: 30 * time.Second, FaultEvery: time.Hour, Pods: 8,
		Settle: time.Minute, Log: &log, Containerd: addr, BrokenRealNode: true, Known: []string{check.KindLeftover}})
	var table strings.Builder
	_ = WriteReport(&table, rep)
	t.Logf("run:\n%s\n%s", log.String(), table.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.RealDeleted == 0 {
		t.Fatalf("no pod of the real node deleted: nothing to leave behind")
	}
	left := 0
	for _, v := range rep.Violations {
		if v.Kind != check.KindLeftover {
			continue
		}
		left++
		if v.Node != rep.RealNode || !strings.HasPrefix(v.Pod, "default/wl-1-") || v.UID == "" {
			t.Errorf("leftover not named by the real node and a workload pod: %v", v)
		}
	}
	if left == 0 {
		t.Errorf("%d of the real node's pods deleted, no container-left violation", rep.RealDeleted)
	}
}
