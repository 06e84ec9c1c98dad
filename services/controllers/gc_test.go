package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// startReplicas runs n controller replicas over a bus with a configmaps bucket.
func startReplicas(t *testing.T, n int) jetstream.KeyValue {
	t.Helper()
	_, conn := bustest.Start(t)
	return runReplicas(t, conn, n)
}

// runReplicas runs n controller replicas over conn, adding a configmaps bucket.
func runReplicas(t *testing.T, conn *bus.Conn, n int) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	specs := []bus.BucketSpec{{Name: bus.BucketConfigMaps, History: 4}, {Name: bus.BucketDaemonSets, History: 4}, {Name: bus.BucketPDBs, History: 4}}
	if err := bus.ProvisionBuckets(ctx, conn.JS, bus.Options{}, specs...); err != nil {
		t.Fatal(err)
	}
	kinds := append([]bus.KindBucket{{APIVersion: "v1", Kind: "ConfigMap", Bucket: bus.BucketConfigMaps, Namespaced: true}}, defaultKinds...)
	var wg sync.WaitGroup
	for i := range n {
		s, err := New(Config{ID: fmt.Sprintf("c%d", i), Kinds: kinds, Resync: time.Second}, conn)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Run(ctx); err != nil {
				t.Errorf("replica: %v", err)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	kv, err := bus.OpenBucket(ctx, conn.JS, bus.BucketConfigMaps)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

type cmOpt func(*corev1.ConfigMap)

func ownedBy(owner string, block bool) cmOpt {
	return func(c *corev1.ConfigMap) {
		c.OwnerReferences = append(c.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner,
			UID: types.UID("uid-" + owner), BlockOwnerDeletion: &block})
	}
}

func deleting(finalizer string) cmOpt {
	return func(c *corev1.ConfigMap) {
		now := metav1.Now()
		c.DeletionTimestamp, c.Finalizers = &now, []string{finalizer}
	}
}

func putCM(t *testing.T, kv jetstream.KeyValue, name string, opts ...cmOpt) {
	t.Helper()
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
	for _, o := range opts {
		o(c)
	}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.CreateEncoded(context.Background(), kv, bus.ObjectKey("default", name), data); err != nil {
		t.Fatal(err)
	}
}

// updateCM changes a stored ConfigMap (compare-and-set, retried).
func updateCM(t *testing.T, kv jetstream.KeyValue, name string, opts ...cmOpt) {
	t.Helper()
	for range 10 {
		e, err := kv.Get(context.Background(), bus.ObjectKey("default", name))
		if err != nil {
			t.Fatal(err)
		}
		c := &corev1.ConfigMap{}
		if err := json.Unmarshal(e.Value(), c); err != nil {
			t.Fatal(err)
		}
		for _, o := range opts {
			o(c)
		}
		data, _ := json.Marshal(c)
		if _, err = bus.UpdateEncoded(context.Background(), kv, e.Key(), data, e.Revision()); err == nil {
			return
		} else if !errors.Is(err, bus.ErrConflict) {
			t.Fatal(err)
		}
	}
	t.Fatalf("update %s: too many conflicts", name)
}

func getCM(t *testing.T, kv jetstream.KeyValue, name string) *corev1.ConfigMap {
	t.Helper()
	e, err := kv.Get(context.Background(), bus.ObjectKey("default", name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &corev1.ConfigMap{}
	if err := json.Unmarshal(e.Value(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// Three replicas collect garbage together: a dependent of a gone owner is deleted, an orphaning owner
// lets its dependents go free before it goes, a foreground owner goes after its dependents.
func TestCollector(t *testing.T) {
	kv := startReplicas(t, 3)
	gone := func(name string) func() bool { return func() bool { return getCM(t, kv, name) == nil } }

	// The owner goes first: the collector looks an owner up live, as kube's does, so a dependent
	// stored before its owner may be collected before the owner arrives.
	putCM(t, kv, "keeper")
	putCM(t, kv, "stray", ownedBy("never-was", false))
	putCM(t, kv, "alive", ownedBy("keeper", false))
	bustest.Eventually(t, 10*time.Second, gone("stray"), "dependent of a missing owner not deleted")

	putCM(t, kv, "orphaner")
	putCM(t, kv, "free", ownedBy("orphaner", true))
	updateCM(t, kv, "orphaner", deleting(metav1.FinalizerOrphanDependents))
	bustest.Eventually(t, 10*time.Second, gone("orphaner"), "orphaning owner not deleted")
	if c := getCM(t, kv, "free"); c == nil || len(c.OwnerReferences) != 0 {
		t.Fatalf("orphan = %+v, want it kept without owner", c)
	}

	putCM(t, kv, "fg")
	putCM(t, kv, "blocker", ownedBy("fg", true), func(c *corev1.ConfigMap) { c.Finalizers = []string{"test/hold"} })
	updateCM(t, kv, "fg", deleting(metav1.FinalizerDeleteDependents))
	bustest.Eventually(t, 10*time.Second, func() bool { c := getCM(t, kv, "blocker"); return c != nil && c.DeletionTimestamp != nil },
		"blocking dependent not marked deleted")
	if getCM(t, kv, "fg") == nil {
		t.Fatal("foreground owner went before its blocking dependent")
	}
	// The dependent's own finalizer goes: then it, then the owner.
	e, err := kv.Get(context.Background(), bus.ObjectKey("default", "blocker"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Delete(context.Background(), kv, e.Key(), e.Revision()); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, gone("fg"), "foreground owner not deleted after its dependents")
	if getCM(t, kv, "alive") == nil {
		t.Fatal("a dependent of a live owner was deleted")
	}
}
