package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/agent/cri"
	podimages "github.com/podbus/podbus/internal/images"
)

// The two-minute form of `make chaos`, with a fixed seed: every service as a process holding its NATS
// credential on a three-node NATS cluster, faults of every kind (disk-full as root only), one agent on
// containerd when this machine runs real pods (its containers held to the history), and no violation
// in the history.
func TestChaosFixedSeed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the deployment for two minutes")
	}
	bin := filepath.Join(t.TempDir(), "podbus")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/podbus").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := keptOnFailure(t)
	var log strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Bin: bin, Dir: dir, Seed: 1, Duration: 2 * time.Minute, FaultEvery: 4 * time.Second, Log: &log,
		Containerd: realRuntime(t)})
	var table strings.Builder
	_ = WriteReport(&table, rep)
	t.Logf("run:\n%s\n%s", log.String(), table.String())
	if err != nil {
		for _, name := range []string{"faults.jsonl"} {
			if b, rerr := os.ReadFile(filepath.Join(dir, name)); rerr == nil {
				t.Logf("%s:\n%s", name, b)
			}
		}
		// The directory stays on this machine only: the test's output carries the end of the logs that
		// explain the failures seen so far (a node that never settled, a Deployment's surge).
		var logs []string
		for _, pattern := range []string{"agent-*.log", "status.log", "workloads-*.log", "controllers-*.log"} {
			m, _ := filepath.Glob(filepath.Join(dir, "logs", pattern))
			logs = append(logs, m...)
		}
		for _, f := range logs {
			if b, rerr := os.ReadFile(f); rerr == nil {
				t.Logf("%s, last lines:\n%s", filepath.Base(f), lastLines(string(b), 30))
			}
		}
		t.Fatal(err)
	}
	want := []string{FaultKill, FaultStop, FaultNATSKill, FaultNATSStop, FaultClock, FaultPartition}
	if os.Geteuid() == 0 {
		want = append(want, FaultDiskFull)
	}
	for _, k := range want {
		if rep.Faults[k] == 0 {
			t.Errorf("no %s fault: %v", k, rep.Faults)
		}
	}
	for _, v := range rep.Violations {
		t.Logf("known, open: %v", v)
	}
	if rep.Created == 0 || rep.Updated == 0 || rep.Deleted == 0 {
		t.Errorf("workload: %d created, %d updated, %d deleted", rep.Created, rep.Updated, rep.Deleted)
	}
	if rep.RealNode != "" && (rep.RealCreated == 0 || rep.RealDeleted == 0) {
		t.Errorf("real node %s: %d pods created, %d deleted", rep.RealNode, rep.RealCreated, rep.RealDeleted)
	}
	if rep.DeploysCreated == 0 || rep.DeploysRolled == 0 {
		t.Errorf("workload: %d deployments created, %d rolled", rep.DeploysCreated, rep.DeploysRolled)
	}
}

// keptOnFailure is a directory for the run that is removed when the test passes and kept, its path
// logged, when it fails: the history, the origin samples and every process's log are what a failure
// under a fixed fault schedule is explained from, and the runs that fail are rare.
func keptOnFailure(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podbus-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the run's directory is kept: %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// realRuntime is the containerd socket of the run's real node (PODBUS_CONTAINERD_ADDRESS, as .ci/run
// exports it, else cri.DefaultAddress), or "" when this machine cannot run real pods: the run goes on
// with simulated agents only, except with CI=true, where it fails.
func realRuntime(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("PODBUS_CONTAINERD_ADDRESS")
	if addr == "" {
		addr = cri.DefaultAddress
	}
	err := cri.Check(context.Background(), addr, nil)
	if err == nil {
		if _, serr := os.Stat(podimages.DefaultBusybox); serr != nil {
			err = podimages.ErrBusyboxMissing
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the real node is required in CI: %v", err)
		}
		t.Logf("no real node, simulated agents only: %v", err)
		return ""
	}
	return addr
}

func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	tests := []struct {
		name, content string
		n             int
		want          string
	}{
		{name: "more lines than asked", content: "a\nb\nc\n", n: 2, want: "b\nc"},
		{name: "fewer lines than asked", content: "a\n", n: 5, want: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := logTail(path, tt.n); got != tt.want {
				t.Errorf("logTail = %q, want %q", got, tt.want)
			}
		})
	}
}
