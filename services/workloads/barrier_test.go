package workloads

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// unstartedReplica is a workloads replica with its buckets but no watches: a test feeds its cache.
func unstartedReplica(t *testing.T) (*bus.Conn, *Service) {
	t.Helper()
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	s, err := New(Config{ID: "b", barrierWait: 200 * time.Millisecond}, bustest.Conn(t, url, "b"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		name string
		dst  *jetstream.KeyValue
	}{{bus.BucketReplicaSets, &s.rsKV}, {bus.BucketDeployments, &s.dKV}, {bus.BucketNamespaces, &s.nsKV}, {bus.BucketPods, &s.pods}} {
		if *b.dst, err = c.JS.KeyValue(context.Background(), b.name); err != nil {
			t.Fatal(err)
		}
	}
	return c, s
}

// The interleaving a chaos run found: a replica created a Deployment's first ReplicaSet with 4 replicas,
// the template changed before its ReplicaSets cache had seen that ReplicaSet, and its next sync counted
// no pods and created the new ReplicaSet with 4 more: 8 pods for replicas 4 + maxSurge 1. A sync that
// would add pods now waits for its cache to hold every ReplicaSet written before it decides.
func TestRollWaitsForAnUnseenReplicaSet(t *testing.T) {
	c, s := unstartedReplica(t)
	ctx := context.Background()
	putDeployment(t, c, webDeployment(4, "app:1", appsv1.RollingUpdateDeploymentStrategyType))
	if err := s.syncDeployment(ctx, "default", "web"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	first := replicaSetNames(t, c)
	if len(first) != 1 {
		t.Fatalf("after the first sync: ReplicaSets %v, want one", first)
	}

	// The template changes; this replica's cache has still not seen the first ReplicaSet.
	putDeployment(t, c, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "app:2" })
	if err := s.syncDeployment(ctx, "default", "web"); !errors.Is(err, errRequeue) {
		t.Fatalf("sync from a cache behind the store: %v, want errRequeue", err)
	}
	if got := replicaSetNames(t, c); len(got) != 1 {
		t.Fatalf("a sync from a cache behind the store made ReplicaSets %v", got)
	}

	// The cache catches up: the new ReplicaSet gets the room maxSurge leaves, one pod.
	kv, err := c.JS.KeyValue(ctx, bus.BucketReplicaSets)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, first[0])
	if err != nil {
		t.Fatal(err)
	}
	s.onReplicaSet(e)
	if err := s.syncDeployment(ctx, "default", "web"); err != nil {
		t.Fatalf("sync from a fresh cache: %v", err)
	}
	names := replicaSetNames(t, c)
	if len(names) != 2 {
		t.Fatalf("ReplicaSets %v, want the old and the new", names)
	}
	for _, n := range names {
		if n == first[0] {
			continue
		}
		ns, name, _ := bus.SplitPodKey(n)
		r, err := s.getRS(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := replicas(r); got != 1 {
			t.Errorf("new ReplicaSet %s has replicas %d, want 1 (4 + maxSurge 1 - the old one's 4)", n, got)
		}
	}
}

// seeReplicaSets feeds s's cache every ReplicaSet in the bucket, as its watch would.
func seeReplicaSets(t *testing.T, c *bus.Conn, s *Service) {
	t.Helper()
	kv, err := c.JS.KeyValue(context.Background(), bus.BucketReplicaSets)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range replicaSetNames(t, c) {
		e, err := kv.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		s.onReplicaSet(e)
	}
}

// The interleaving behind a flaky revision count: a replica read the Deployment at app:1, another
// replica then rolled it to app:2, and the first one's ReplicaSets cache already held app:2's
// ReplicaSet (revision 2) when it went on. Its app:1 ReplicaSet then looked like the target of a
// rollback, and it raised that one's revision to 3 (the other replica then raised app:2's to 4). A
// rollback now happens only while the Deployment is still the one the sync read.
func TestNoRollbackFromAStaleDeployment(t *testing.T) {
	c, s := unstartedReplica(t)
	ctx := context.Background()
	revisions := func() map[string]int64 {
		out := map[string]int64{}
		for _, k := range replicaSetNames(t, c) {
			ns, name, _ := bus.SplitPodKey(k)
			r, err := s.getRS(ctx, ns, name)
			if err != nil {
				t.Fatal(err)
			}
			out[r.obj.Spec.Template.Spec.Containers[0].Image] = revision(r.obj)
		}
		return out
	}

	putDeployment(t, c, webDeployment(3, "app:1", appsv1.RecreateDeploymentStrategyType))
	if err := s.syncDeployment(ctx, "default", "web"); err != nil && !errors.Is(err, errRequeue) {
		t.Fatalf("first sync: %v", err)
	}
	seeReplicaSets(t, c, s)
	stale, err := s.getDeployment(ctx, "default", "web") // this sync's read, at app:1
	if err != nil {
		t.Fatal(err)
	}
	putDeployment(t, c, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "app:2" })
	if err := s.syncDeployment(ctx, "default", "web"); err != nil && !errors.Is(err, errRequeue) { // the other replica's, at app:2
		t.Fatalf("sync at app:2: %v", err)
	}
	seeReplicaSets(t, c, s)
	if got := revisions(); got["app:1"] != 1 || got["app:2"] != 2 {
		t.Fatalf("revisions %v after the roll, want app:1 at 1 and app:2 at 2", got)
	}

	x := &dsync{s: s, d: stale.obj, dt: stale.template, drev: stale.rev}
	if err := x.classify(ctx); err != nil {
		t.Fatal(err)
	}
	if err := x.ensureNewRS(ctx); !errors.Is(err, errRequeue) {
		t.Errorf("ensureNewRS from the stale read: %v, want errRequeue", err)
	}
	if got := revisions(); got["app:1"] != 1 || got["app:2"] != 2 {
		t.Errorf("revisions %v after the stale sync, want app:1 at 1 and app:2 at 2", got)
	}
}

// startWeb stores "default/web" at app:1 with maxSurge 1 and maxUnavailable 0 (no old pod goes before a
// new one is available, so a sync's room is maxSurge's alone), syncs it once and feeds s's cache.
func startWeb(t *testing.T, c *bus.Conn, s *Service, replicas int32) {
	t.Helper()
	putDeployment(t, c, func(d *appsv1.Deployment) {
		webDeployment(replicas, "app:1", appsv1.RollingUpdateDeploymentStrategyType)(d)
		none, one := intstr.FromInt32(0), intstr.FromInt32(1)
		d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: &none, MaxSurge: &one}
	})
	if err := s.syncDeployment(context.Background(), "default", "web"); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	seeReplicaSets(t, c, s)
}

// countWeb reads "default/web" and counts its ReplicaSets from s's cache, as a sync after its barrier.
func countWeb(t *testing.T, s *Service) *dsync {
	t.Helper()
	ctx := context.Background()
	d, err := s.getDeployment(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	x := &dsync{s: s, d: d.obj, dt: d.template, drev: d.rev, fresh: true}
	if err := x.classify(ctx); err != nil {
		t.Fatal(err)
	}
	return x
}

// storedReplicaSets reads every ReplicaSet in the bucket.
func storedReplicaSets(t *testing.T, c *bus.Conn, s *Service) []*rsEntry {
	t.Helper()
	var out []*rsEntry
	for _, k := range replicaSetNames(t, c) {
		ns, name, _ := bus.SplitPodKey(k)
		r, err := s.getRS(context.Background(), ns, name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// The interleaving behind a chaos run's surge verdict: two replicas decide on one Deployment from two
// templates. Replica A reads it at app:2 and counts its ReplicaSets; replica B, at app:3, creates
// app:3's ReplicaSet with the room maxSurge leaves; then A's creation of app:2's ReplicaSet with that
// same room arrives (late: a write held on a cut route arrives after the route heals). Each write is a
// compare-and-set of its own key, so both were stored: 6 pods for replicas 4 + maxSurge 1. A write
// that adds pods now stands only while the Deployment's ReplicaSets are those its decision counted; a
// write of another Deployment's ReplicaSet in the namespace meanwhile does not stop it.
func TestAddingWriteStandsOnWhatItCounted(t *testing.T) {
	for _, tc := range []struct {
		name        string
		other       string // the ReplicaSet written between A's count and its write: "app:3" (B's), or another Deployment's
		wantRequeue bool
		wantImages  []string // web's ReplicaSets' after A's write
	}{
		{"the same Deployment's new ReplicaSet", "app:3", true, []string{"app:1", "app:3"}},
		{"another Deployment's ReplicaSet", "other", false, []string{"app:1", "app:2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := unstartedReplica(t)
			ctx := context.Background()
			kv, err := c.JS.KeyValue(ctx, bus.BucketReplicaSets)
			if err != nil {
				t.Fatal(err)
			}
			startWeb(t, c, s, 4)

			// A reads the Deployment at app:2 and counts its ReplicaSets: app:1's, with 4.
			putDeployment(t, c, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "app:2" })
			x := countWeb(t, s)

			switch tc.other {
			case "app:3": // B rolls on and syncs from a fresh count.
				putDeployment(t, c, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "app:3" })
				if err := s.syncDeployment(ctx, "default", "web"); err != nil {
					t.Fatalf("B's sync: %v", err)
				}
			default:
				n := int32(2)
				rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default", UID: "other-uid",
					Labels: map[string]string{"app": "other"}}, Spec: appsv1.ReplicaSetSpec{Replicas: &n,
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}}}
				data, err := workload.Encode(rs, &pb.Pod{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := bus.CreateEncoded(ctx, kv, bus.ObjectKey("default", "other"), data); err != nil {
					t.Fatal(err)
				}
			}
			seeReplicaSets(t, c, s)

			// A's creation arrives.
			err = x.ensureNewRS(ctx)
			if got := errors.Is(err, errRequeue); got != tc.wantRequeue || (err != nil && !got) {
				t.Fatalf("A's creation: %v, want requeue %v", err, tc.wantRequeue)
			}
			var images []string
			var pods int32
			for _, r := range storedReplicaSets(t, c, s) {
				if r.obj.Labels["app"] == "web" {
					images = append(images, r.obj.Spec.Template.Spec.Containers[0].Image)
					pods += replicas(r)
				}
			}
			slices.Sort(images)
			if !slices.Equal(images, tc.wantImages) || pods != 5 {
				t.Errorf("web's ReplicaSets of %v with %d replicas, want %v with 5 (replicas 4 + maxSurge 1)", images, pods, tc.wantImages)
			}
		})
	}
}

// A scale-up sent before the Deployment rolled and delivered after another replica gave the roll's
// new ReplicaSet its room (a write held on a cut route): the ReplicaSet it scales was not written
// meanwhile, so its own compare-and-set held, and 7 pods were allowed for replicas 4 + maxSurge 1.
func TestHeldScaleUpIsRefused(t *testing.T) {
	c, s := unstartedReplica(t)
	ctx := context.Background()
	startWeb(t, c, s, 2)

	// This replica reads the Deployment scaled to 4 and scales app:1's ReplicaSet from 2 to 4.
	putDeployment(t, c, func(d *appsv1.Deployment) { four := int32(4); d.Spec.Replicas = &four })
	x := countWeb(t, s)
	if x.newRS == nil || replicas(x.newRS) != 2 {
		t.Fatalf("the count: new ReplicaSet %v, want app:1's with 2", x.newRS)
	}
	scaled := x.newRS.obj.DeepCopy()
	four := int32(4)
	scaled.Spec.Replicas = &four

	// Another replica, at the Deployment rolled to app:2, creates its ReplicaSet with the room: 5 - 2.
	three, yes := int32(3), true
	next := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-next", Namespace: "default", UID: "next-uid",
		Labels: map[string]string{"app": "web"}, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1",
			Kind: "Deployment", Name: "web", UID: x.d.UID, Controller: &yes}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &three, Selector: x.d.Spec.Selector}}
	data, err := workload.Encode(next, &pb.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := c.JS.KeyValue(ctx, bus.BucketReplicaSets)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.CreateEncoded(ctx, kv, bus.ObjectKey("default", "web-next"), data); err != nil {
		t.Fatal(err)
	}
	seeReplicaSets(t, c, s)

	// This replica's scale-up arrives.
	if err := x.writeRS(ctx, x.newRS, scaled); !errors.Is(err, errRequeue) {
		t.Errorf("the held scale-up: %v, want errRequeue", err)
	}
	var total int32
	for _, r := range storedReplicaSets(t, c, s) {
		total += replicas(r)
	}
	if total > 5 {
		t.Errorf("the ReplicaSets allow %d pods, want at most 5 (replicas 4 + maxSurge 1)", total)
	}
}
