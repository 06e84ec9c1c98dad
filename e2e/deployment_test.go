package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/cluster/up"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/workloads"
)

// deploymentYAML is a Deployment of app=name rolling one pod at a time (maxUnavailable 1, maxSurge 25%).
func deploymentYAML(name, image string, replicas string) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + name + `}
spec:
  replicas: ` + replicas + `
  selector: {matchLabels: {app: ` + name + `}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {app: ` + name + `}}
    spec:
      containers: [{name: app, image: ` + image + `, resources: {requests: {cpu: 10m}}}]
`
}

// podCounter watches the pods bucket and keeps, over every change, the fewest Ready pods of one app
// (once armed) and the most pods of it not terminating: every state the store went through, not samples.
type podCounter struct {
	mu        sync.Mutex
	kv        jetstream.KeyValue
	rev       uint64 // the last revision of the bucket applied
	pods      map[string]*pb.Pod
	app       string
	armed     bool
	minReady  int
	maxActive int
	atMax     map[string]int // pods by pod-template-hash when there were the most
}

func watchPods(t *testing.T, c *bus.Conn, app string) *podCounter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	kv, err := c.JS.KeyValue(ctx, bus.BucketPods)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	pc := &podCounter{kv: kv, pods: map[string]*pb.Pod{}, app: app, minReady: 1 << 30}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-w.Updates():
				if e == nil {
					continue
				}
				pc.apply(e)
			}
		}
	}()
	t.Cleanup(func() { cancel(); _ = w.Stop(); wg.Wait() })
	return pc
}

func (pc *podCounter) apply(e jetstream.KeyValueEntry) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.rev = e.Revision()
	if e.Operation() != jetstream.KeyValuePut {
		delete(pc.pods, e.Key())
	} else {
		p := &pb.Pod{}
		if proto.Unmarshal(e.Value(), p) != nil || p.GetMetadata().GetLabels()["app"] != pc.app {
			return
		}
		pc.pods[e.Key()] = p
	}
	ready, active := pc.counts()
	if pc.armed {
		pc.minReady = min(pc.minReady, ready)
	}
	if active > pc.maxActive {
		pc.maxActive = active
		pc.atMax = map[string]int{}
		for _, p := range pc.pods {
			if p.GetMetadata().GetDeletionTimestamp() == nil {
				pc.atMax[p.GetMetadata().GetLabels()["pod-template-hash"]]++
			}
		}
	}
}

func (pc *podCounter) counts() (ready, active int) {
	for _, p := range pc.pods {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		active++
		if isReady(p) {
			ready++
		}
	}
	return ready, active
}

// arm starts counting the fewest Ready pods from now, once the counter has caught up with the bucket:
// a baseline taken from a watch that lags would be short of pods kubectl already sees Ready.
func (pc *podCounter) arm(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last, err := bus.StoreRevision(ctx, pc.kv)
	if err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		return pc.rev >= last
	}, "pod counter caught up with revision %d", last)
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.armed = true
	pc.minReady, _ = pc.counts()
}

func (pc *podCounter) result() (minReady, maxActive int) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.minReady, pc.maxActive
}

// A Deployment of 30 replicas on 5 simulated nodes becomes Available; kubectl set image rolls it one pod
// at a time (never fewer than 29 Ready, never more than 30 + maxSurge), rollout history lists the
// revisions, rollout undo goes back, kubectl scale and rollout restart work, as on Kubernetes. With NATS
// authorization, so the controllers' role is shown to suffice.
func TestDeploymentRollingUpdate(t *testing.T) {
	needKubectl(t)
	cl, conn := startCluster(t, up.Config{Nodes: 5, StartDelay: 20 * time.Millisecond, NATSAuth: true})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	pc := watchPods(t, conn, "web")

	k.must("apply", "-f", writeFile(t, "web.yaml", deploymentYAML("web", "example.local/app:1", "30")))
	k.must("rollout", "status", "deployment/web", "--timeout=90s")
	k.must("wait", "--for=condition=Available", "deployment/web", "--timeout=30s")
	if out := k.must("get", "deploy", "web"); !strings.Contains(out, "30/30") || !strings.Contains(out, "UP-TO-DATE") {
		t.Errorf("kubectl get deploy:\n%s", out)
	}
	if out := k.must("get", "rs", "-o", "wide"); !strings.Contains(out, "DESIRED") || !strings.Contains(out, "pod-template-hash=") {
		t.Errorf("kubectl get rs -o wide:\n%s", out)
	}

	pc.arm(t)
	k.must("set", "image", "deployment/web", "app=example.local/app:2")
	k.must("rollout", "status", "deployment/web", "--timeout=90s")
	minReady, maxActive := pc.result()
	if minReady < 29 || maxActive > 30+8 {
		t.Errorf("during the roll: %d Ready pods at the fewest (want >= 29), %d pods at the most (want <= 38)", minReady, maxActive)
	}
	t.Logf("roll: fewest Ready %d, most pods %d %v", minReady, maxActive, pc.atMax)
	hist := k.must("rollout", "history", "deployment/web")
	if !strings.Contains(hist, "1 ") || !strings.Contains(hist, "2 ") {
		t.Errorf("rollout history:\n%s", hist)
	}

	k.must("rollout", "undo", "deployment/web")
	k.must("rollout", "status", "deployment/web", "--timeout=90s")
	if img := k.must("get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"); img != "example.local/app:1" {
		t.Errorf("after undo the image is %q", img)
	}
	if rev := k.must("get", "deploy", "web", "-o", `jsonpath={.metadata.annotations.deployment\.kubernetes\.io/revision}`); rev != "3" {
		t.Errorf("after undo the revision is %q, want 3", rev)
	}

	k.must("scale", "deployment/web", "--replicas=10")
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	k.must("rollout", "pause", "deployment/web")
	k.must("rollout", "resume", "deployment/web")
	k.must("rollout", "restart", "deployment/web")
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	if out := k.must("get", "deploy", "web", "-o", "jsonpath={.status.readyReplicas}/{.status.updatedReplicas}"); out != "10/10" {
		t.Errorf("after scale and restart: ready/updated %s", out)
	}
	k.must("create", "deployment", "hello", "--image=example.local/app:1", "--replicas=2")
	k.must("rollout", "status", "deployment/hello", "--timeout=60s")
	if out := k.must("get", "deploy,rs,pods", "-l", "app=hello"); !strings.Contains(out, "deployment.apps/hello") ||
		!strings.Contains(out, "replicaset.apps/hello-") || strings.Count(out, "pod/hello-") != 2 {
		t.Errorf("kubectl get deploy,rs,pods:\n%s", out)
	}
	reasons := k.must("get", "events", "-o", "jsonpath={.items[*].reason}")
	for _, r := range []string{"ScalingReplicaSet", "SuccessfulCreate", "SuccessfulDelete"} {
		if !strings.Contains(reasons, r) {
			t.Errorf("no %s event among %q", r, reasons)
		}
	}
}

// The controllers at three replicas (up's and two more on the same NATS), one stopped mid-roll: the
// pods of the Deployment never exceed replicas + maxSurge, and the roll completes.
func TestDeploymentControllerReplicas(t *testing.T) {
	needKubectl(t)
	cl, conn := startCluster(t, up.Config{Nodes: 5, StartDelay: 20 * time.Millisecond})
	k := kube{t: t, kubeconfig: cl.Kubeconfig}
	stops := make([]func(), 2)
	for i := range stops {
		svc, err := workloads.New(workloads.Config{ID: fmt.Sprintf("extra-%d", i)}, bustest.Conn(t, cl.NATSURL, fmt.Sprintf("workloads-extra-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := svc.Run(ctx); err != nil {
				t.Errorf("workloads replica %d: %v", i, err)
			}
		}()
		var once sync.Once
		stops[i] = func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stops[i])
	}
	pc := watchPods(t, conn, "api")
	yaml := strings.Replace(deploymentYAML("api", "example.local/app:1", "20"), "maxUnavailable: 1", "maxUnavailable: 1, maxSurge: 3", 1)
	k.must("apply", "-f", writeFile(t, "api.yaml", yaml))
	k.must("rollout", "status", "deployment/api", "--timeout=90s")

	pc.arm(t)
	k.must("set", "image", "deployment/api", "app=example.local/app:2")
	bustest.Eventually(t, 60*time.Second, func() bool {
		out, _ := k.run("get", "deploy", "api", "-o", "jsonpath={.status.updatedReplicas}")
		n, _ := strconv.Atoi(out)
		return n >= 5
	}, "the roll did not start")
	stops[0]()
	k.must("rollout", "status", "deployment/api", "--timeout=90s")
	minReady, maxActive := pc.result()
	t.Logf("roll with a replica stopped: fewest Ready %d, most pods %d %v", minReady, maxActive, pc.atMax)
	if maxActive > 23 || minReady < 19 {
		t.Errorf("during the roll: %d pods at the most (want <= 23), %d Ready at the fewest (want >= 19)", maxActive, minReady)
	}
	bustest.Eventually(t, 30*time.Second, func() bool {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		ready, active := pc.counts()
		return ready == 20 && active == 20
	}, "the Deployment did not settle at 20 Ready pods")
}
