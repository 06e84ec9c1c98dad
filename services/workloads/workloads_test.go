package workloads

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestFenceposts(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int) *intstr.IntOrString { v := intstr.FromInt(n); return &v }
	tests := []struct {
		name                  string
		replicas              int32
		surge, unavail        *intstr.IntOrString
		wantSurge, wantUnavai int32
	}{
		{"defaults of 30", 30, pct("25%"), pct("25%"), 8, 7}, // surge rounds up, unavailable down
		{"ints", 30, num(3), num(1), 3, 1},
		{"both zero: one unavailable", 10, num(0), pct("0%"), 0, 1},
		{"percent of 1", 1, pct("25%"), pct("25%"), 1, 0},
		{"unset: 25% each", 8, nil, nil, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &tc.replicas, Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: tc.surge, MaxUnavailable: tc.unavail}}}}
			s, u := fenceposts(d)
			if s != tc.wantSurge || u != tc.wantUnavai {
				t.Errorf("fenceposts = %d, %d; want %d, %d", s, u, tc.wantSurge, tc.wantUnavai)
			}
		})
	}
}

func testPod(name, node, phase string, ready bool, created int64) *pb.Pod {
	p := &pb.Pod{Metadata: &pb.ObjectMeta{Name: name, CreationTimestamp: timestamppb.New(time.Unix(created, 0))},
		Spec: &pb.PodSpec{NodeName: node}, Status: &pb.PodStatus{Phase: phase}}
	if ready {
		p.Status.Conditions = []*pb.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.New(time.Unix(created+10, 0))}}
	}
	return p
}

func TestVictimsOrder(t *testing.T) {
	pods := []*pb.Pod{
		testPod("ready-old", "n1", "Running", true, 100),
		testPod("ready-new", "n1", "Running", true, 200),
		testPod("unscheduled", "", "Pending", false, 50),
		testPod("pending", "n2", "Pending", false, 60),
		testPod("running-not-ready", "n2", "Running", false, 70),
	}
	want := []string{"unscheduled", "pending", "running-not-ready", "ready-new", "ready-old"}
	got := victims(pods, len(pods))
	for i, p := range got {
		if p.GetMetadata().GetName() != want[i] {
			t.Fatalf("victim %d = %s, want order %v", i, p.GetMetadata().GetName(), want)
		}
	}
	if n := len(victims(pods, 2)); n != 2 {
		t.Errorf("victims(2) gave %d", n)
	}
}

func TestPodNamesAreReplicaIndependent(t *testing.T) {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f", UID: "u-1"}}
	seen := map[string]bool{}
	for slot := range 50 {
		n := podName(rs, slot)
		if n != podName(rs, slot) {
			t.Fatal("podName is not deterministic")
		}
		if len(n) != len("web-7d9f-")+5 {
			t.Errorf("podName %q", n)
		}
		seen[n] = true
	}
	if len(seen) < 45 {
		t.Errorf("50 slots gave only %d names", len(seen))
	}
	other := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f", UID: "u-2"}}
	if podName(other, 0) == podName(rs, 0) {
		t.Error("two ReplicaSets of one name (recreated) share pod names")
	}
}

// fakeStore applies the controllers' pod commands to the pods bucket, as the store would, and counts
// them: a created pod is Running and Ready at once, a deleted one goes at once.
type fakeStore struct {
	mu      sync.Mutex
	creates map[string]int // pod name -> create commands seen
	deletes int
	// reasons counts the delete commands' reasons.
	reasons map[string]int
	// notReady: created pods run but never become Ready.
	notReady bool
	// onCreate sees each created pod before it is stored.
	onCreate func(p *pb.Pod)
}

func runFakeStore(t *testing.T, c *bus.Conn) *fakeStore {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pods, err := bus.OpenBucket(ctx, c.JS, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := c.JS.OrderedConsumer(ctx, bus.StreamPods, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.SubjPodCommands}})
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeStore{creates: map[string]int{}, reasons: map[string]int{}}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		cmd := &pb.PodCommand{}
		if err := proto.Unmarshal(m.Data(), cmd); err != nil {
			t.Errorf("command: %v", err)
			return
		}
		p := cmd.GetPod()
		key := bus.PodKey(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName())
		fs.mu.Lock()
		defer fs.mu.Unlock()
		switch cmd.GetOp() {
		case pb.PodCommand_OP_CREATE:
			fs.creates[p.GetMetadata().GetName()]++
			if fs.onCreate != nil {
				fs.onCreate(p)
			}
			p.Spec.NodeName = "n1"
			p.Status = &pb.PodStatus{Phase: "Running"}
			if !fs.notReady {
				podutil.SetPodCondition(p, &pb.PodCondition{Type: "Ready", Status: "True"}, time.Now())
			}
			_, _ = bus.Create(ctx, pods, key, p) // a second create of a name fails, as the store's does
		case pb.PodCommand_OP_DELETE:
			fs.deletes++
			fs.reasons[cmd.GetReason()]++
			_ = pods.Delete(ctx, key)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return fs
}

func (fs *fakeStore) counts() (creates, distinct, deletes int) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, n := range fs.creates {
		creates += n
	}
	return creates, len(fs.creates), fs.deletes
}

func startReplicas(t *testing.T, c *bus.Conn, url string, n int) {
	t.Helper()
	for i := range n {
		svc, err := New(Config{ID: fmt.Sprintf("r%d", i), Resync: 200 * time.Millisecond}, bustest.Conn(t, url, fmt.Sprintf("r%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := svc.Run(ctx); err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
		}()
		t.Cleanup(func() { cancel(); <-done })
	}
}

func provisionApps(t *testing.T, c *bus.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := bus.ProvisionBuckets(ctx, c.JS, bus.Options{}, bus.BucketSpec{Name: bus.BucketReplicaSets, History: 4},
		bus.BucketSpec{Name: bus.BucketDeployments, History: 4}, bus.BucketSpec{Name: bus.BucketNamespaces, History: 4})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := c.JS.KeyValue(ctx, bus.BucketNamespaces)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.CreateEncoded(ctx, ns, bus.NodeKey("default"), []byte(`{"metadata":{"name":"default"}}`)); err != nil {
		t.Fatal(err)
	}
}

// A ReplicaSet in a terminating namespace creates no pods: the namespace controller is emptying it.
func TestReplicaSetTerminatingNamespace(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	ctx := context.Background()
	ns, err := c.JS.KeyValue(ctx, bus.BucketNamespaces)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Put(ctx, bus.NodeKey("default"), []byte(`{"metadata":{"name":"default","deletionTimestamp":"2026-01-01T00:00:00Z"}}`)); err != nil {
		t.Fatal(err)
	}
	fs := runFakeStore(t, c)
	startReplicas(t, c, url, 1)
	putRS(t, c, 3)
	bustest.Eventually(t, 30*time.Second, func() bool { return rsStatusOf(t, c).ObservedGeneration == 1 }, "ReplicaSet never synced")
	if n, _, _ := fs.counts(); n != 0 {
		t.Errorf("%d pods created in a terminating namespace", n)
	}
}

func putRS(t *testing.T, c *bus.Conn, replicas int32) {
	t.Helper()
	template := &pb.Pod{Metadata: &pb.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: &pb.PodSpec{Containers: []*pb.Container{{Name: "app", Image: "app:1"}}}}
	putWeb(t, c, bus.BucketReplicaSets, func(cur *appsv1.ReplicaSet) (*appsv1.ReplicaSet, *pb.Pod) {
		if cur == nil {
			return &appsv1.ReplicaSet{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "rs-uid", Generation: 1},
				Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}},
			}, template
		}
		cur.Spec.Replicas = &replicas
		cur.Generation++
		return cur, template
	})
}

func rsStatusOf(t *testing.T, c *bus.Conn) appsv1.ReplicaSetStatus {
	t.Helper()
	return getWeb[appsv1.ReplicaSet](t, c, bus.BucketReplicaSets).Status
}

// Three replicas keep one ReplicaSet: together they send exactly one create per pod, recreate a pod
// that goes, and scale down by exactly the surplus.
func TestReplicaSetReplicasCreateEachPodOnce(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	fs := runFakeStore(t, c)
	startReplicas(t, c, url, 3)

	putRS(t, c, 10)
	settled := func(ready int32) func() bool {
		return func() bool {
			st := rsStatusOf(t, c)
			return st.ReadyReplicas == ready && st.Replicas == ready && st.ObservedGeneration > 0
		}
	}
	bustest.Eventually(t, 30*time.Second, settled(10), "ReplicaSet not at 10 Ready: %+v", rsStatusOf(t, c))
	if creates, distinct, _ := fs.counts(); creates != 10 || distinct != 10 {
		t.Fatalf("10 replicas took %d create commands for %d names", creates, distinct)
	}

	// A pod goes: one replacement.
	pods, err := c.JS.KeyValue(context.Background(), bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pods.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first := <-keys.Keys()
	_ = keys.Stop()
	if err := pods.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 30*time.Second, func() bool { n, _, _ := fs.counts(); return n == 11 }, "the deleted pod was not replaced")
	bustest.Eventually(t, 30*time.Second, settled(10), "ReplicaSet not back at 10 Ready")

	putRS(t, c, 4)
	bustest.Eventually(t, 30*time.Second, settled(4), "ReplicaSet not scaled to 4: %+v", rsStatusOf(t, c))
	if creates, _, deletes := fs.counts(); creates != 11 || deletes != 6 {
		t.Errorf("after scaling to 4: %d creates, %d deletes; want 11 and 6", creates, deletes)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.reasons[ReasonScaleDown] != 6 {
		t.Errorf("delete reasons %v, want %d of %q", fs.reasons, 6, ReasonScaleDown)
	}
}
