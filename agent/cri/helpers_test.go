package cri_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/uuid"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
	"github.com/podbus/podbus/internal/images"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// address is the containerd socket the tests use.
func address() string {
	if a := os.Getenv("PODBUS_CONTAINERD_ADDRESS"); a != "" {
		return a
	}
	return cri.DefaultAddress
}

// requireContainerd skips (fails with CI=true) when this machine cannot run real pods.
func requireContainerd(t testing.TB) {
	t.Helper()
	err := cri.Check(context.Background(), address(), nil)
	if err == nil {
		_, err = os.Stat(images.DefaultBusybox)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("real runtime tests cannot run: %v", err)
		}
		t.Skipf("real runtime tests skipped: %v", err)
	}
}

// startRegistry serves an OCI registry on loopback holding podbus's busybox image (internal/images),
// and returns the image's reference. The demo-web image is left out: building it takes a go build.
func startRegistry(t testing.TB) (addr, busybox string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	reg, err := images.StartRegistry(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	img, err := images.BusyboxImage(images.DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	busybox = reg.Addr() + "/" + images.Busybox
	ref, err := name.ParseReference(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	return reg.Addr(), busybox
}

// users counts the runtimes of each test namespace: the last to go removes the namespace.
var users = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

// newRuntime returns a runtime of node on cidr in a containerd namespace of the test's own; it removes
// every sandbox when the test ends, and the last runtime of ns removes the namespace with all it holds.
// state "" makes a fresh state dir.
func newRuntime(t testing.TB, node, cidr, ns, state string) *cri.Runtime {
	t.Helper()
	if state == "" {
		state = t.TempDir()
	}
	ctx := context.Background()
	r, err := cri.New(ctx, cri.Config{NodeName: node, Address: address(), Namespace: ns, PodCIDR: cidr, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	users.Lock()
	users.n[ns]++
	users.Unlock()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sbs, err := r.ListSandboxes(ctx)
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, sb := range sbs {
			if err := r.RemoveSandbox(ctx, sb.Sandbox); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		users.Lock()
		users.n[ns]--
		last := users.n[ns] == 0
		if last {
			delete(users.n, ns)
		}
		users.Unlock()
		if last {
			if err := cri.RemoveNamespace(ctx, r.Client(), ns); err != nil {
				t.Errorf("cleanup: containerd namespace %s left: %v", ns, err)
			}
		}
		_ = exec.Command("ip", "link", "del", r.BridgeName()).Run()
		_ = r.Close()
	})
	return r
}

// testNamespace is a containerd namespace for one test.
func testNamespace() string { return "podbus-test-" + uuid.NewString()[:8] }

func newPod(name string, containers ...*pb.Container) *pb.Pod {
	return &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: name, Namespace: "default", Uid: uuid.NewString()},
		Spec:     &pb.PodSpec{Containers: containers, RestartPolicy: "Always"},
	}
}

func ctr(name, image string, command ...string) *pb.Container {
	return &pb.Container{Name: name, Image: image, Command: command, ImagePullPolicy: "IfNotPresent"}
}

// runPod creates the sandbox and starts each container of the pod (attempt 0).
func runPod(t testing.TB, r *cri.Runtime, p *pb.Pod) (agent.Sandbox, []agent.ContainerID) {
	t.Helper()
	ctx := context.Background()
	sb, err := r.RunSandbox(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var ids []agent.ContainerID
	for _, c := range p.Spec.Containers {
		ids = append(ids, startContainer(t, r, sb, c, 0))
	}
	return sb, ids
}

func startContainer(t testing.TB, r *cri.Runtime, sb agent.Sandbox, c *pb.Container, attempt int32) agent.ContainerID {
	t.Helper()
	ctx := context.Background()
	if _, err := r.PullImage(ctx, c.Image, c.ImagePullPolicy); err != nil {
		t.Fatal(err)
	}
	id, err := r.CreateContainer(ctx, sb, c, attempt)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// eventually polls f until it returns nil, failing with its last error after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var errNotYet = errors.New("not yet")

func notYet(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errNotYet, fmt.Sprintf(format, args...))
}
