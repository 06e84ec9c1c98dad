package namespaces

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

type env struct {
	t                   *testing.T
	conn                *bus.Conn
	ns, cms, pods       jetstream.KeyValue
	mu                  sync.Mutex
	deleteCommands      map[string]int // pod name -> commands seen
	configMapsAtLastPod int            // configmaps present when the last pod still stored was asked to go
}

func setup(t *testing.T) *env {
	t.Helper()
	_, conn := bustest.Start(t)
	ctx := context.Background()
	if err := bus.ProvisionBuckets(ctx, conn.JS, bus.Options{},
		bus.BucketSpec{Name: bus.BucketNamespaces, History: 4}, bus.BucketSpec{Name: bus.BucketConfigMaps, History: 4}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, conn: conn, deleteCommands: map[string]int{}}
	var err error
	for name, dst := range map[string]*jetstream.KeyValue{bus.BucketNamespaces: &e.ns, bus.BucketConfigMaps: &e.cms, bus.BucketPods: &e.pods} {
		if *dst, err = bus.OpenBucket(ctx, conn.JS, name); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *env) namespace(name string, terminating bool) {
	e.t.Helper()
	n := &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("ns-" + name)},
		Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
	if terminating {
		now := metav1.Now()
		n.DeletionTimestamp = &now
		n.Status.Phase = corev1.NamespaceTerminating
	}
	data, _ := json.Marshal(n)
	if _, err := e.ns.Put(context.Background(), bus.NodeKey(name), data); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) pod(ns, name, node string) {
	e.t.Helper()
	p := &pb.Pod{Metadata: &pb.ObjectMeta{Name: name, Namespace: ns, Uid: ns + "-" + name}, Spec: &pb.PodSpec{NodeName: node}}
	if _, err := bus.Create(context.Background(), e.pods, bus.PodKey(ns, name), p); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) configMap(ns, name string) {
	e.t.Helper()
	data, _ := json.Marshal(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	if _, err := e.cms.Create(context.Background(), bus.ObjectKey(ns, name), data); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) keys(kv jetstream.KeyValue, ns string) int {
	e.t.Helper()
	keys, err := listKeys(context.Background(), kv, ns)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(keys)
}

// runFakeStore answers pod delete commands as the store does: an unbound pod goes at once, a bound one
// is marked terminating (its agent would stop it; the test removes it).
func (e *env) runFakeStore() {
	sub, err := e.conn.NC.Subscribe(bus.SubjPodDelete, func(m *nats.Msg) {
		cmd := &pb.PodCommand{}
		if proto.Unmarshal(m.Data, cmd) != nil {
			return
		}
		md := cmd.GetPod().GetMetadata()
		key := bus.PodKey(md.GetNamespace(), md.GetName())
		e.mu.Lock()
		e.deleteCommands[md.GetName()]++
		e.mu.Unlock()
		ctx := context.Background()
		cur := &pb.Pod{}
		rev, err := bus.Get(ctx, e.pods, key, cur)
		if err != nil {
			return // gone already: a controller with an older view may ask again, harmlessly
		}
		cms, _ := listKeys(ctx, e.cms, md.GetNamespace())
		// Counted while the pod was still stored as read: a late duplicate command may read the pod
		// just before the test removes it and count after the namespace emptied.
		if again, err := bus.Get(ctx, e.pods, key, &pb.Pod{}); err == nil && again == rev {
			e.mu.Lock()
			e.configMapsAtLastPod = len(cms)
			e.mu.Unlock()
		}
		if cur.GetSpec().GetNodeName() == "" {
			_ = bus.Delete(ctx, e.pods, key, rev)
			return
		}
		if cur.GetMetadata().GetDeletionTimestamp() != nil {
			return // already going: the store keeps the first deletion's time, and so writes nothing
		}
		cur.Metadata.DeletionTimestamp = timestamppb.Now()
		_, _ = bus.Update(ctx, e.pods, key, cur, rev)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.conn.NC.Flush(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
}

func (e *env) runController(id string) { e.runControllerResync(id, time.Second) }

func (e *env) runControllerResync(id string, resync time.Duration) {
	e.t.Helper()
	svc, err := New(Config{ID: id, Resync: resync}, e.conn)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Run %s: %v", id, err)
		}
	})
}

func (e *env) exists(kv jetstream.KeyValue, key string) bool {
	_, err := kv.Get(context.Background(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

// TestFinalize: pods go first (through delete commands), then configmaps and events, then the
// namespace; another namespace is left alone. Two controllers run at once.
func TestFinalize(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(map[int]string{1: "one controller", 2: "two controllers"}[replicas], func(t *testing.T) {
			e := setup(t)
			e.namespace("team", false)
			e.namespace("keep", false)
			e.pod("team", "unbound", "")
			e.pod("team", "bound", "n1")
			e.pod("keep", "other", "n1")
			e.configMap("team", "c1")
			e.configMap("team", "c2")
			e.configMap("keep", "c3")
			pub := bus.NewPublisher(e.conn.JS, "test")
			ev := &pb.Event{Metadata: &pb.ObjectMeta{Name: "bound.1", Namespace: "team"}, Reason: "Started"}
			if err := pub.Publish(context.Background(), bus.SubjEvent("team", "bound"), ev, bus.Meta{}); err != nil {
				t.Fatal(err)
			}
			e.runFakeStore()
			for i := range replicas {
				e.runController("c" + string(rune('0'+i)))
			}
			e.namespace("team", true)

			// The bound pod is terminating; everything else waits for it.
			bustest.Eventually(t, 10*time.Second, func() bool {
				p := &pb.Pod{}
				_, err := bus.Get(context.Background(), e.pods, bus.PodKey("team", "bound"), p)
				return err == nil && p.GetMetadata().GetDeletionTimestamp() != nil && !e.exists(e.pods, bus.PodKey("team", "unbound"))
			}, "pods asked to go")
			if n := e.keys(e.cms, "team"); n != 2 {
				t.Errorf("configmaps deleted before the pods went: %d left", n)
			}
			if !e.exists(e.ns, bus.NodeKey("team")) {
				t.Fatal("namespace gone before its pods")
			}
			// The agent stopped it; the status service removes it, reading again after a conflict as it
			// does (the store may still be writing the pod's deletion).
			bustest.Eventually(t, 10*time.Second, func() bool {
				p := &pb.Pod{}
				rev, err := bus.Get(context.Background(), e.pods, bus.PodKey("team", "bound"), p)
				if err != nil {
					t.Fatal(err)
				}
				return bus.Delete(context.Background(), e.pods, bus.PodKey("team", "bound"), rev) == nil
			}, "bound pod removed")
			bustest.Eventually(t, 10*time.Second, func() bool { return !e.exists(e.ns, bus.NodeKey("team")) }, "namespace removed")
			if n := e.keys(e.cms, "team"); n != 0 {
				t.Errorf("%d configmaps left", n)
			}
			if msgs := bustest.Messages(t, e.conn, bus.StreamEvents, "event.team.>"); len(msgs) != 0 {
				t.Errorf("%d events left", len(msgs))
			}
			if !e.exists(e.pods, bus.PodKey("keep", "other")) || !e.exists(e.cms, bus.ObjectKey("keep", "c3")) || !e.exists(e.ns, bus.NodeKey("keep")) {
				t.Error("namespace keep was touched")
			}
			// One command per pod in the PODS stream, however many controllers sent it.
			if msgs := bustest.Messages(t, e.conn, bus.StreamPods, bus.SubjPodDelete); len(msgs) != 2 {
				t.Errorf("%d delete commands stored, want 2", len(msgs))
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.configMapsAtLastPod != 2 {
				t.Errorf("configmaps present when pods were deleted = %d, want 2", e.configMapsAtLastPod)
			}
		})
	}
}

// consumers counts the consumers of a bucket's stream.
func (e *env) consumers(bucket string) int {
	e.t.Helper()
	return bustest.Consumers(e.t, e.conn, bus.KVStream(bucket))
}

// TestPodWatch: the controller watches no pod while no namespace terminates, and the pods of a
// terminating namespace only while it does; their changes alone (the resync is an hour away) finish it.
func TestPodWatch(t *testing.T) {
	e := setup(t)
	e.namespace("team", false)
	e.namespace("keep", false)
	e.pod("team", "bound", "n1")
	e.pod("keep", "other", "n1")
	e.runFakeStore()
	e.runControllerResync("c0", time.Hour)
	bustest.Eventually(t, 10*time.Second, func() bool { return e.consumers(bus.BucketNamespaces) == 1 }, "namespaces watched")
	if n := e.consumers(bus.BucketPods); n != 0 {
		t.Fatalf("%d consumers on the pods bucket with no namespace terminating, want 0", n)
	}

	e.namespace("team", true)
	bustest.Eventually(t, 10*time.Second, func() bool {
		p := &pb.Pod{}
		_, err := bus.Get(context.Background(), e.pods, bus.PodKey("team", "bound"), p)
		return err == nil && p.GetMetadata().GetDeletionTimestamp() != nil
	}, "bound pod asked to go")
	if n := e.consumers(bus.BucketPods); n == 0 {
		t.Error("no consumer on the pods bucket with a namespace terminating")
	}
	// Another namespace's pod changing meanwhile leaves it alone; the pod's own removal finishes the
	// namespace (with the resync an hour away, only the watch can tell the controller).
	other := &pb.Pod{}
	rev, err := bus.Get(context.Background(), e.pods, bus.PodKey("keep", "other"), other)
	if err != nil {
		t.Fatal(err)
	}
	other.Metadata.Labels = map[string]string{"a": "b"}
	if _, err := bus.Update(context.Background(), e.pods, bus.PodKey("keep", "other"), other, rev); err != nil {
		t.Fatal(err)
	}
	p := &pb.Pod{}
	if rev, err = bus.Get(context.Background(), e.pods, bus.PodKey("team", "bound"), p); err != nil {
		t.Fatal(err)
	}
	if err := bus.Delete(context.Background(), e.pods, bus.PodKey("team", "bound"), rev); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool { return !e.exists(e.ns, bus.NodeKey("team")) }, "namespace removed")
	bustest.Eventually(t, 10*time.Second, func() bool { return e.consumers(bus.BucketPods) == 0 }, "pods no longer watched")
	if !e.exists(e.pods, bus.PodKey("keep", "other")) {
		t.Error("namespace keep's pod was touched")
	}
}

// TestOtherFinalizers: the controller removes only its own finalizer; the namespace stays while others
// remain.
func TestOtherFinalizers(t *testing.T) {
	e := setup(t)
	n := &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "x", DeletionTimestamp: &metav1.Time{Time: time.Now()}},
		Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes, "example.com/other"}},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating},
	}
	data, _ := json.Marshal(n)
	if _, err := e.ns.Put(context.Background(), bus.NodeKey("x"), data); err != nil {
		t.Fatal(err)
	}
	e.runController("c0")
	bustest.Eventually(t, 10*time.Second, func() bool {
		en, err := e.ns.Get(context.Background(), bus.NodeKey("x"))
		if err != nil {
			return false
		}
		got, err := decodeNamespace(en.Value())
		return err == nil && len(got.Spec.Finalizers) == 1 && got.Spec.Finalizers[0] == "example.com/other"
	}, "kubernetes finalizer removed, the other kept")

	// Finalizing it again writes nothing: a write would wake every replica's watch to finalize it again.
	ctx := context.Background()
	en, err := e.ns.Get(ctx, bus.NodeKey("x"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{ID: "again"}, e.conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := svc.finalize(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if after, err := e.ns.Get(ctx, bus.NodeKey("x")); err != nil || after.Revision() != en.Revision() {
		t.Errorf("namespace written again: revision %d -> %v (%v)", en.Revision(), after, err)
	}
}

func TestNewConfig(t *testing.T) {
	_, conn := bustest.Start(t)
	for _, id := range []string{"", "a.b", "a b"} {
		if _, err := New(Config{ID: id}, conn); !errors.Is(err, ErrConfig) {
			t.Errorf("ID %q: %v", id, err)
		}
	}
	if _, err := New(Config{ID: "x"}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no conn: %v", err)
	}
}
