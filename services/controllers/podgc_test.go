package controllers

import (
	"context"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// putPod stores p and returns its revision.
func putPod(t *testing.T, kv jetstream.KeyValue, p *pb.Pod) uint64 {
	t.Helper()
	data, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(context.Background(), bus.ObjectKey(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName()), data)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// An orphaning owner's pod is sent back whole, less the owner, at the revision the cache has: the
// cache keeps only part of a pod, the update replaces the stored one.
func TestCollectorOrphansPodWhole(t *testing.T) {
	_, conn := bustest.Start(t)
	updates := make(chan *nats.Msg, 16)
	sub, err := conn.NC.ChanSubscribe(bus.SubjPodUpdate, updates)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx := context.Background()
	pods, err := bus.OpenBucket(ctx, conn.JS, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	p := runningPod(1)
	p.Metadata.Namespace = "default"
	p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, &pb.OwnerReference{ApiVersion: "v1", Kind: "ConfigMap",
		Name: "owner", Uid: "uid-owner", BlockOwnerDeletion: &yes})
	p.Metadata.Annotations = map[string]string{"kept": "whole"}
	rev := putPod(t, pods, p)
	cms := runReplicas(t, conn, 1)
	putCM(t, cms, "owner", deleting(metav1.FinalizerOrphanDependents))

	select {
	case m := <-updates:
		cmd := &pb.PodCommand{}
		if err := proto.Unmarshal(m.Data, cmd); err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(p).(*pb.Pod)
		want.Metadata.OwnerReferences = want.Metadata.OwnerReferences[:1]
		if cmd.GetOp() != pb.PodCommand_OP_UPDATE || cmd.GetExpectedRevision() != rev {
			t.Errorf("command %v at revision %d, want an update at %d", cmd.GetOp(), cmd.GetExpectedRevision(), rev)
		}
		if d := gocmp.Diff(want, cmd.GetPod(), protocmp.Transform()); d != "" {
			t.Errorf("pod sent (-want +got):\n%s", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no pod update orphaning the pod")
	}
}

// storedPod reads the pod at the cache's revision only, and of the cache's uid.
func TestStoredPod(t *testing.T) {
	_, conn := bustest.Start(t)
	ctx := context.Background()
	kv, err := bus.OpenBucket(ctx, conn.JS, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	p := runningPod(1)
	key := bus.ObjectKey(p.GetMetadata().GetNamespace(), p.GetMetadata().GetName())
	rev := putPod(t, kv, p)
	s := testService()
	s.kv[bus.BucketPods] = kv
	for _, tc := range []struct {
		name string
		key  string
		pe   *podEntry
		want *pb.Pod
	}{
		{"cached revision", key, &podEntry{uid: p.GetMetadata().GetUid(), rev: rev}, p},
		{"newer in the bucket", key, &podEntry{uid: p.GetMetadata().GetUid(), rev: rev - 1}, nil},
		{"another pod of the name", key, &podEntry{uid: "other", rev: rev}, nil},
		{"gone", "default/none", &podEntry{uid: "x", rev: 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.storedPod(ctx, tc.key, tc.pe)
			if err != nil {
				t.Fatal(err)
			}
			if d := gocmp.Diff(tc.want, got, protocmp.Transform()); d != "" {
				t.Errorf("storedPod (-want +got):\n%s", d)
			}
		})
	}
}
