package cri_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/namespaces"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/uuid"

	"github.com/podbus/podbus/agent"
	"github.com/podbus/podbus/agent/cri"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

const busyboxPath = "/bin/busybox" // Debian's busybox-static

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
		_, err = os.Stat(busyboxPath)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("real runtime tests cannot run: %v", err)
		}
		t.Skipf("real runtime tests skipped: %v", err)
	}
}

// startRegistry serves an OCI registry on loopback holding a busybox image, and returns the image's
// reference. (Swap for internal/images once it exists.)
func startRegistry(t testing.TB) (addr, busybox string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	addr = strings.TrimPrefix(srv.URL, "http://")
	busybox = addr + "/podbus/busybox:test"
	if err := pushBusybox(busybox); err != nil {
		t.Fatal(err)
	}
	return addr, busybox
}

func pushBusybox(ref string) error {
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "tmp/", "www/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	for _, applet := range []string{"sh", "httpd", "wget", "nc", "sleep", "echo", "cat", "ls", "true", "false"} {
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			return err
		}
	}
	page := []byte("hello from podbus\n")
	if err := tw.WriteHeader(&tar.Header{Name: "www/index.html", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(page))}); err != nil {
		return err
	}
	if _, err := tw.Write(page); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(r, img)
}

// newRuntime returns a runtime of node on cidr in a containerd namespace of the test's own; it removes
// every sandbox, image and the namespace when the test ends. state "" makes a fresh state dir.
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
		nctx := namespaces.WithNamespace(ctx, ns)
		if imgs, err := r.Client().ListImages(nctx); err == nil {
			for _, im := range imgs {
				_ = r.Client().ImageService().Delete(nctx, im.Name(), images.SynchronousDelete())
			}
		}
		// Another runtime of the test may still use the namespace; the last cleanup removes it.
		_ = r.Client().NamespaceService().Delete(ctx, ns)
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
