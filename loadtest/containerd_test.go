package loadtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/internal/images"
)

// A containerd run interrupted while its pod runs: the cluster, API included, stops with the run's
// context before the cleanup begins, so the pod cannot be deleted through the API. It is removed
// through containerd instead, and nothing of the run is left: no network namespace, and the
// containerd namespace and the bridge are gone.
func TestContainerdCleanupAfterAPIStopped(t *testing.T) {
	address := os.Getenv("PODBUS_CONTAINERD_ADDRESS")
	err := cri.Check(context.Background(), address, nil)
	if err == nil {
		_, err = os.Stat(images.DefaultBusybox)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("real containers are required in CI: %v", err)
		}
		t.Skipf("real containers skipped: %v", err)
	}
	img, err := images.BusyboxImage(images.DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	image, closeRegistry, err := serveImage(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	defer closeRegistry()

	runID := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	node, ns := "bench-t"+runID, "podbus-bench-t"+runID
	dir := filepath.Join(t.TempDir(), "cluster")
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	pods, stop, err := startPodbus(runCtx, Config{ContainerdAddress: address, Namespace: "default", NoAudit: true}, dir, node, ns, image, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.one(runCtx, "ctrd-t-1"); err != nil {
		t.Fatal(err)
	}

	interrupt()
	// The API is gone before stop deletes anything.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := pods.api.client.Get(pods.api.podsURL())
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("the API still answers a minute after the run's context ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := cleanupContainerd(address, []string{ns}, []string{node}); err != nil {
		t.Fatalf("cleanup: %v", err)
	}

	if left, err := os.ReadDir(cri.NetNSDir(filepath.Join(dir, "agent", node))); err == nil && len(left) > 0 {
		t.Errorf("network namespaces left: %v", left)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
	if address == "" {
		address = cri.DefaultAddress
	}
	client, err := containerd.New(address)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	nss, err := client.NamespaceService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(nss, ns) {
		t.Errorf("containerd namespace %s left", ns)
	}
}
