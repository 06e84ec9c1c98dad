package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
)

// Stopping `up` leaves the real node's pods running with their network namespaces mounted under the
// data directory (as a kubelet restart would); `podbus down` (up.Down) then stops and removes them, runs
// CNI DEL, unmounts the namespaces, deletes the node's bridge and the data directory.
func TestDownRemovesRealPods(t *testing.T) {
	needContainerd(t)
	reg := builtinRegistry(t)
	n := newRealNode(t)
	data := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl, err := up.Start(ctx, up.Config{DataDir: data, NATSPort: -1, APIAddr: "127.0.0.1:0", Nodes: 0,
		Runtime: up.RuntimeContainerd, ContainerdAddress: containerdAddress(), RealNode: n.name,
		RealNodePodCIDR: n.cidr, ContainerdNamespace: n.ns, RegistryAddr: "off", HeartbeatInterval: time.Second,
		RealNodeEvictionHard: noEviction})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	conn := bustest.Conn(t, cl.NATSURL, "e2e-observer")
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	var manifest strings.Builder
	for i := range 2 {
		fmt.Fprintf(&manifest, `---
apiVersion: v1
kind: Pod
metadata: {name: d%d}
spec:
%s  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: %s/podbus/busybox:latest
    command: ["sh", "-c", "exec sleep 3600"]
    resources: {requests: {cpu: 10m, memory: 8Mi}}
`, i, pinned(n.name), reg)
	}
	k.must("apply", "-f", writeFile(t, "down.yaml", manifest.String()))
	waitAll(t, conn, 2, 90*time.Second, isReady)
	cancel()
	if err := cl.Wait(); err != nil {
		t.Fatalf("cluster stopped with: %v", err)
	}

	client, err := containerd.New(containerdAddress())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	state := filepath.Join(data, "agent", n.name)
	nss, _ := os.ReadDir(cri.NetNSDir(state))
	if running, _ := tasks(t, client, n.ns); len(running) != 2 || len(nss) != 2 {
		t.Fatalf("after up stopped: %d pods running, %d netns; want both left as they were", len(running), len(nss))
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer dcancel()
	if err := up.Down(dctx, up.DownConfig{DataDir: data, ContainerdAddress: containerdAddress(),
		ContainerdNamespace: n.ns, RealNodePodCIDR: n.cidr}); err != nil {
		t.Fatalf("down: %v", err)
	}
	if _, containers := tasks(t, client, n.ns); len(containers) != 0 {
		t.Errorf("containers left after down: %v", containers)
	}
	if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("data dir still there: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), data) {
		t.Errorf("mounts left under %s", data)
	}
	if _, err := net.InterfaceByName(cri.BridgeFor(n.name)); err == nil {
		t.Errorf("bridge %s left", cri.BridgeFor(n.name))
	}
}
