package workloads

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Two replicas, their pod caches fed by hand: replica A claims the deletion of one of two pods (its
// command goes nowhere: no store), sees it terminating and clears the claim; replica B, whose cache has not seen the deletion yet, must
// wait rather than take the terminating pod for an active one and delete a second.
func TestClearedClaimsKeepTheirRevision(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	putRS(t, c, 2)
	ctx := context.Background()
	kv, err := c.JS.KeyValue(ctx, bus.BucketReplicaSets)
	if err != nil {
		t.Fatal(err)
	}
	replica := func(id string) *Service {
		s, err := New(Config{ID: id}, bustest.Conn(t, url, id))
		if err != nil {
			t.Fatal(err)
		}
		s.rsKV = kv
		if s.nsKV, err = c.JS.KeyValue(ctx, bus.BucketNamespaces); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := replica("a"), replica("b")
	r, err := a.getRS(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	pod := func(name, uid string, deleting bool) *cachedPod {
		p := testPod(name, "node-1", "Running", true, 100)
		p.Metadata.Namespace, p.Metadata.Uid, p.Metadata.Labels = "default", uid, map[string]string{"app": "web"}
		p.Metadata.OwnerReferences = []*pb.OwnerReference{ownerRef("apps/v1", "ReplicaSet", "web", string(r.obj.UID))}
		if deleting {
			p.Metadata.DeletionTimestamp = timestamppb.Now()
		}
		return compactPod(p)
	}
	for _, s := range []*Service{a, b} {
		s.c.setPod("default/web-1", "default", pod("web-1", "uid-1", false), 1)
		s.c.setPod("default/web-2", "default", pod("web-2", "uid-2", false), 2)
	}
	if ps, rev := a.c.podsFor("default", string(r.obj.UID), true); len(ps) != 2 {
		t.Fatalf("replica A's cache: %d pods at %d, uid %q", len(ps), rev, r.obj.UID)
	}
	// A scaled to 1 and claimed web-2's deletion; its cache then saw web-2 terminating.
	putRS(t, c, 1)
	if err := a.syncReplicaSet(ctx, "default", "web"); err != nil {
		t.Fatalf("replica A deciding: %v", err)
	}
	cl := readClaims(rsOf(t, a))
	if len(cl.Delete) != 1 {
		t.Fatalf("replica A claimed %+v, want one deletion", cl)
	}
	for uid := range cl.Delete {
		name := map[string]string{"uid-1": "web-1", "uid-2": "web-2"}[uid]
		a.c.setPod("default/"+name, "default", pod(name, uid, true), 3)
	}
	if err := a.syncReplicaSet(ctx, "default", "web"); err != nil {
		t.Fatalf("replica A clearing: %v", err)
	}
	before := rsOf(t, a)
	if cl := readClaims(before); !cl.empty() || cl.PodsRev != 3 {
		t.Errorf("after clearing: claims %+v, want none at pods revision 3", cl)
	}
	if err := b.syncReplicaSet(ctx, "default", "web"); !errors.Is(err, errRequeue) {
		t.Errorf("replica B behind the cleared claims: %v, want errRequeue", err)
	}
	if after := rsOf(t, a); !equality.Semantic.DeepEqual(after, before) {
		t.Errorf("replica B decided from a stale cache: claims %q", after.Annotations[AnnotationExpected])
	}
}

func rsOf(t *testing.T, s *Service) *appsv1.ReplicaSet {
	t.Helper()
	r, err := s.getRS(context.Background(), "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	return r.obj
}
