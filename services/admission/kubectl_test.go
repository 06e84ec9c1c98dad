package admission

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/syncbuf"

	"github.com/podbus/podbus/internal/events"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// kubectlBinary is the real kubectl (a wrapper that picks the binary matching the server's minor).
const kubectlBinary = "/usr/bin/kubectl"

// runFakeAgent plays scheduler + binder + agent + status: it binds new pods to n1 and makes them
// Running and Ready, records a Scheduled event, and removes terminating pods.
func runFakeAgent(t *testing.T, conn *bus.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	b, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	now := timestamppb.Now()
	node := &pb.Node{
		Metadata: &pb.ObjectMeta{Name: "n1", Uid: "node-n1", CreationTimestamp: now, Labels: map[string]string{"node-role.kubernetes.io/worker": ""}},
		Status: &pb.NodeStatus{
			Capacity:   map[string]string{"cpu": "4", "memory": "8Gi", "pods": "110"},
			Conditions: []*pb.NodeCondition{{Type: "Ready", Status: "True", Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
			Addresses:  []*pb.NodeAddress{{Type: "InternalIP", Address: "10.0.0.1"}},
			NodeInfo:   &pb.NodeSystemInfo{KubeletVersion: "v1.32.0-podbus", OsImage: "podbus", KernelVersion: "6.1", ContainerRuntimeVersion: "podbus://1"},
		},
	}
	if _, err := bus.Create(ctx, b.Nodes, bus.NodeKey("n1"), node); err != nil {
		t.Fatal(err)
	}
	rec := events.NewRecorder(bus.NewPublisher(conn.JS, "test/agent"), "default-scheduler", "")
	w, err := b.Pods.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			var e jetstream.KeyValueEntry
			select {
			case <-ctx.Done():
				return
			case e = <-w.Updates():
			}
			if e == nil {
				continue
			}
			p := &pb.Pod{}
			if proto.Unmarshal(e.Value(), p) != nil {
				continue
			}
			switch {
			case p.GetMetadata().GetDeletionTimestamp() != nil:
				_ = bus.Delete(ctx, b.Pods, e.Key(), e.Revision())
			case p.GetSpec().GetNodeName() == "":
				ts := timestamppb.Now()
				p.Spec.NodeName = "n1"
				p.Status.Phase = "Running"
				p.Status.PodIp = "10.1.0.7"
				p.Status.PodIps = []string{"10.1.0.7"}
				p.Status.HostIp = "10.0.0.1"
				p.Status.StartTime = ts
				for _, c := range []string{"PodScheduled", "Initialized", "ContainersReady", "Ready"} {
					p.Status.Conditions = append(p.Status.Conditions, &pb.PodCondition{Type: c, Status: "True", LastTransitionTime: ts})
				}
				for _, c := range p.GetSpec().GetContainers() {
					p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, &pb.ContainerStatus{
						Name: c.GetName(), Image: c.GetImage(), Ready: true, Started: proto.Bool(true),
						State: &pb.ContainerState{Running: &pb.ContainerStateRunning{StartedAt: ts}},
					})
				}
				if _, err := bus.Update(ctx, b.Pods, e.Key(), p, e.Revision()); err == nil {
					_, _ = rec.Event(events.PodRef(p), "Normal", "Scheduled", "Successfully assigned "+p.GetMetadata().GetNamespace()+"/"+p.GetMetadata().GetName()+" to n1", "", time.Now())
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); _ = w.Stop(); wg.Wait() })
}

type kubectl struct {
	t   *testing.T
	env []string
	dir string
}

func newKubectl(t *testing.T, server string) *kubectl {
	if _, err := os.Stat(kubectlBinary); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubectl is required in CI: %v", err)
		}
		t.Skipf("kubectl not installed (%v)", err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- cluster: {server: %s}
  name: podbus
contexts:
- context: {cluster: podbus, namespace: default}
  name: podbus
current-context: podbus
`, server)
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return &kubectl{t: t, dir: dir, env: append(os.Environ(), "KUBECONFIG="+kc, "HOME="+dir)}
}

func (k *kubectl) file(name, content string) string {
	p := filepath.Join(k.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		k.t.Fatal(err)
	}
	return p
}

// run runs kubectl and returns stdout+stderr; wantErr says whether it must fail.
func (k *kubectl) run(wantErr bool, args ...string) string {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBinary, args...)
	cmd.Env = k.env
	out, err := cmd.CombinedOutput()
	if (err != nil) != wantErr {
		k.t.Fatalf("kubectl %s: err=%v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func mustContain(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output does not contain %q:\n%s", w, out)
		}
	}
}

// TestKubectl drives the real kubectl against admission with a fake store and a fake agent.
func TestKubectl(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real kubectl")
	}
	// Anonymous: kubectl sends credentials only over TLS.
	e := start(t, nil, false)
	runFakeAgent(t, e.conn)
	k := newKubectl(t, e.base)

	mustContain(t, k.run(false, "get", "ns"), "default", "kube-system", "Active")
	podYAML := k.file("web.yaml", `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: nginx
    image: nginx:1.27
`)
	mustContain(t, k.run(false, "create", "-f", podYAML), "pod/web created")
	mustContain(t, k.run(false, "wait", "--for=condition=Ready", "pod/web", "--timeout=30s"), "pod/web condition met")
	mustContain(t, k.run(false, "get", "pods"), "NAME", "web", "1/1", "Running")
	mustContain(t, k.run(false, "get", "pods", "-o", "wide"), "10.1.0.7", "n1", "NOMINATED NODE")
	mustContain(t, k.run(false, "get", "pods", "-o", "yaml"), "name: web", "image: nginx:1.27", "qosClass: BestEffort")
	mustContain(t, k.run(false, "get", "pod", "web", "-o", "jsonpath={.spec.nodeName}/{.status.phase}"), "n1/Running")
	mustContain(t, k.run(false, "get", "pods", "-A"), "NAMESPACE", "default")
	mustContain(t, k.run(false, "get", "po", "-l", "app=web"), "web")
	mustContain(t, k.run(false, "get", "nodes"), "n1", "Ready", "worker", "v1.32.0-podbus")
	mustContain(t, k.run(false, "get", "events"), "Scheduled", "pod/web")
	mustContain(t, k.run(false, "describe", "pod", "web"), "Name:", "web", "Node:", "n1", "Events:", "Successfully assigned")

	apiYAML := `apiVersion: v1
kind: Pod
metadata:
  name: api
spec:
  containers:
  - name: app
    image: %s
`
	mustContain(t, k.run(false, "apply", "-f", k.file("api.yaml", fmt.Sprintf(apiYAML, "busybox:1"))), "pod/api created")
	mustContain(t, k.run(false, "apply", "-f", k.file("api.yaml", fmt.Sprintf(apiYAML, "busybox:1"))), "pod/api unchanged")
	out := k.run(false, "apply", "-f", k.file("api.yaml", fmt.Sprintf(apiYAML, "busybox:2")))
	mustContain(t, out, "pod/api configured")
	if strings.Contains(out, "arning") {
		t.Errorf("apply printed a warning:\n%s", out)
	}
	mustContain(t, k.run(false, "get", "pod", "api", "-o", "jsonpath={.spec.containers[0].image}"), "busybox:2")

	bad := k.file("bad.yaml", `apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  foo: 1
  containers: [{name: c, image: nginx}]
`)
	mustContain(t, k.run(true, "create", "-f", bad), `unknown field "spec.foo"`)
	mustContain(t, k.run(false, "explain", "pod.spec.containers"), "FIELD: containers <[]Container>", "image\t<string>")
	mustContain(t, k.run(true, "get", "pod", "nope"), `pods "nope" not found`)

	// get -w prints the rows of new pods as they come.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := exec.CommandContext(ctx, kubectlBinary, "get", "pods", "-w")
	watch.Env = k.env
	var buf syncbuf.Buffer
	watch.Stdout, watch.Stderr = &buf, &buf
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(buf.String(), "api") }, "get -w lists existing pods: %s", &buf)
	k.run(false, "create", "-f", k.file("late.yaml", strings.ReplaceAll(fmt.Sprintf(apiYAML, "nginx"), "name: api", "name: late")))
	bustest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(buf.String(), "late") }, "get -w shows the new pod: %s", &buf)
	cancel()
	_ = watch.Wait()

	mustContain(t, k.run(false, "delete", "pod", "web"), `pod "web" deleted`)
	mustContain(t, k.run(true, "get", "pod", "web"), `pods "web" not found`)
}
