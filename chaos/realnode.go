package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/audit/check"
	podimages "github.com/podbus/podbus/internal/images"
)

// RealLabel is the label and NoSchedule taint (value "containerd") of the node whose agent runs its
// pods with containerd: only the workload's pods that select and tolerate it go there, since the
// others' images exist for the simulated runtime only.
const RealLabel = "chaos.podbus.io/runtime"

// realCommand keeps a busybox container running and ends it at once on SIGTERM.
var realCommand = []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}

// realNode is the one agent on the containerd runtime: a containerd namespace, pod CIDR, bridge and
// state directory of its own, kept across the kill -9 faults as a real node's would be.
type realNode struct {
	name, address, namespace, cidr, state string
	image                                 string // podbus/busybox in the harness's registry
	registry                              *podimages.Registry
	client                                *containerd.Client
}

// newRealNode checks that this machine runs real pods and serves the busybox image on loopback.
func newRealNode(ctx context.Context, address, dir string) (*realNode, error) {
	if err := cri.Check(ctx, address, nil); err != nil {
		return nil, err
	}
	if _, err := os.Stat(podimages.DefaultBusybox); err != nil {
		return nil, podimages.ErrBusyboxMissing
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	n := &realNode{name: "real-" + id, address: address, namespace: realNamespace("real-" + id),
		cidr: fmt.Sprintf("10.252.%d.0/24", b[0]), state: filepath.Join(dir, "real-node")}
	img, err := podimages.BusyboxImage(podimages.DefaultBusybox)
	if err != nil {
		return nil, err
	}
	// Stopped by close: ctx may end with up's, well before the run does.
	if n.registry, err = podimages.StartRegistry(context.WithoutCancel(ctx), "127.0.0.1:0"); err != nil {
		return nil, err
	}
	n.image = n.registry.Addr() + "/" + podimages.Busybox
	ref, err := name.ParseReference(n.image)
	if err == nil {
		err = remote.Write(ref, img, remote.WithContext(ctx))
	}
	if err == nil {
		n.client, err = containerd.New(address)
	}
	if err != nil {
		_ = n.registry.Close()
		return nil, fmt.Errorf("real node: %w", err)
	}
	return n, nil
}

// agentArgs are the flags of its agent, after the simulated agents' (the last of a flag wins).
func (n *realNode) agentArgs() []string {
	return []string{"--runtime", "containerd", "--containerd-address", n.address, "--containerd-namespace", n.namespace,
		"--state-dir", n.state, "--pod-cidr", n.cidr, "--eviction-hard", "none",
		"--node-labels", RealLabel + "=containerd", "--register-with-taints", RealLabel + "=containerd:NoSchedule"}
}

// ListContainers implements check.ContainerLister from containerd itself rather than through the
// agent's runtime: every container of the node's namespace, running when its task runs.
func (n *realNode) ListContainers(ctx context.Context) ([]check.Container, error) {
	ctx = namespaces.WithNamespace(ctx, n.namespace)
	cs, err := n.client.Containers(ctx)
	if err != nil {
		return nil, err
	}
	var out []check.Container
	for _, c := range cs {
		info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
		if errdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		l := info.Labels
		ct := check.Container{ID: c.ID(), PodUID: l[cri.LabelPodUID], Pod: l[cri.LabelPodNamespace] + "/" + l[cri.LabelPodName],
			Name: l[cri.LabelContainerName]}
		task, err := c.Task(ctx, nil)
		switch {
		case err == nil:
			st, err := task.Status(ctx)
			if err != nil && !errdefs.IsNotFound(err) {
				return nil, err
			}
			ct.Running = err == nil && st.Status == containerd.Running
		case !errdefs.IsNotFound(err):
			return nil, err
		}
		out = append(out, ct)
	}
	return out, nil
}

// close removes whatever the node left (sandboxes and their network namespaces, containers, images,
// the namespace, the bridge) once its agent has stopped, and stops the registry.
func (n *realNode) close(ctx context.Context) error {
	defer n.registry.Close()
	defer n.client.Close()
	// New also removes the network namespaces no sandbox record names (a killed agent's).
	rt, err := cri.New(ctx, cri.Config{NodeName: n.name, Address: n.address, Namespace: n.namespace, PodCIDR: n.cidr, StateDir: n.state})
	if err != nil {
		return err
	}
	defer rt.Close()
	var errs []error
	sbs, err := rt.ListSandboxes(ctx)
	errs = append(errs, err)
	for _, sb := range sbs {
		errs = append(errs, rt.RemoveSandbox(ctx, sb.Sandbox))
	}
	errs = append(errs, cri.RemoveNamespace(ctx, n.client, n.namespace))
	_ = exec.CommandContext(ctx, "ip", "link", "del", rt.BridgeName()).Run()
	return errors.Join(errs...)
}

// realNamespace is the containerd namespace of the real node named node.
func realNamespace(node string) string { return "podbus-chaos-" + strings.TrimPrefix(node, "real-") }

// upRealNode makes the last agent the real node when the run asks for one.
func (h *harness) upRealNode(ctx context.Context, agents []string) error {
	if h.cfg.Containerd == "" {
		return nil
	}
	n, err := newRealNode(ctx, h.cfg.Containerd, h.cfg.Dir)
	if err != nil {
		return fmt.Errorf("real node: %w", err)
	}
	h.real = n
	agents[len(agents)-1] = n.name
	h.logf("%s runs its pods with containerd (%s, namespace %s, pod CIDR %s, image %s)", n.name, n.address, n.namespace, n.cidr, n.image)
	return nil
}

// realArgs are the extra agent flags of node.
func (h *harness) realArgs(node string) []string {
	if h.real == nil || node != h.real.name {
		return nil
	}
	args := h.real.agentArgs()
	if h.cfg.BrokenRealNode {
		args = append(args, "--test-keep-sandboxes")
	}
	return args
}

func (h *harness) containerListers() map[string]check.ContainerLister {
	if h.real == nil {
		return nil
	}
	return map[string]check.ContainerLister{h.real.name: h.real}
}

// closeRealNode cleans the real node up after every agent stopped.
func (h *harness) closeRealNode() {
	if h.real == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := h.real.close(ctx); err != nil {
		h.logf("clean up %s: %v", h.real.name, err)
	}
}
