package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The AUDIT stream receives pipeline messages and bucket records with their subjects and headers, and
// refuses deletes and purges; provisioning again changes nothing.
func TestAuditStream(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bus.Provision(ctx, c.JS, bus.Options{}); err != nil {
		t.Fatalf("provision twice: %v", err)
	}
	pub := bus.NewPublisher(c.JS, "test/a")
	if err := pub.Publish(ctx, bus.SubjPodScheduled, &pb.SchedulingDecision{Uid: "u1"}, bus.Meta{PodUID: "u1", Key: "default/web"}); err != nil {
		t.Fatal(err)
	}
	b, err := bus.OpenBuckets(ctx, c.JS)
	if err != nil {
		t.Fatal(err)
	}
	key := bus.PodKey("default", "web")
	rev, err := bus.Create(ctx, b.Pods, key, &pb.Pod{Metadata: &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Delete(ctx, b.Pods, key, rev); err != nil {
		t.Fatal(err)
	}
	// The binder's ledger is not copied; node records are.
	if _, err := bus.Create(ctx, b.Alloc, bus.NodeKey("n1"), &pb.NodeAllocation{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Create(ctx, b.Nodes, bus.NodeKey("n1"), &pb.Node{Metadata: &pb.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool {
		return len(bustest.Messages(t, c, bus.StreamAudit, ">")) == 4
	}, "AUDIT has the decision, the put and the delete of the pod, and the node")
	msgs := bustest.Messages(t, c, bus.StreamAudit, ">")
	bySubject := map[string][]*jetstream.RawStreamMsg{}
	for _, m := range msgs {
		bySubject[m.Subject] = append(bySubject[m.Subject], m)
	}
	if d := bySubject[bus.SubjPodScheduled]; len(d) != 1 || d[0].Header.Get(bus.HdrActor) != "test/a" || d[0].Header.Get(bus.HdrPodUID) != "u1" {
		t.Errorf("decision not sourced with its headers: %v", d)
	}
	if n := len(bySubject[bus.SubjKV(bus.BucketNodes)+bus.NodeKey("n1")]); n != 1 {
		t.Errorf("%d node records in AUDIT, want 1", n)
	}
	if n := len(bySubject[bus.SubjKV(bus.BucketAlloc)+bus.NodeKey("n1")]); n != 0 {
		t.Errorf("%d alloc records in AUDIT, want none", n)
	}
	kv := bySubject[bus.SubjKV(bus.BucketPods)+key]
	if len(kv) != 2 || kv[0].Header.Get(bus.HdrKVOperation) != "" || kv[1].Header.Get(bus.HdrKVOperation) != "DEL" {
		t.Fatalf("pod records: %v", kv)
	}

	s, err := c.JS.Stream(ctx, bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, msgs[0].Sequence); err == nil {
		t.Error("deleting an audit message was allowed")
	}
	if err := s.SecureDeleteMsg(ctx, msgs[0].Sequence); err == nil {
		t.Error("erasing an audit message was allowed")
	}
	if err := s.Purge(ctx); err == nil {
		t.Error("purging the audit stream was allowed")
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(bus.SubjPodScheduled)); err == nil {
		t.Error("purging a subject of the audit stream was allowed")
	}
	if n := len(bustest.Messages(t, c, bus.StreamAudit, ">")); n != 4 {
		t.Errorf("AUDIT has %d messages after the refused deletes, want 4", n)
	}
}

// AUDIT keeps the writes of the workload kinds' buckets it is provisioned with, never a Secret's.
func TestAuditSourcesWorkloadBuckets(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := bus.Options{Buckets: []bus.BucketSpec{{Name: bus.BucketReplicaSets}, {Name: bus.BucketSecrets}, {Name: bus.BucketDaemonSets}}}
	if err := bus.Provision(ctx, c.JS, o); err != nil {
		t.Fatal(err)
	}
	srcs := map[string]bool{}
	for _, s := range bus.AuditConfig(o).Sources {
		srcs[s.Name] = true
	}
	if !srcs[bus.KVStream(bus.BucketReplicaSets)] || !srcs[bus.KVStream(bus.BucketDaemonSets)] ||
		srcs[bus.KVStream(bus.BucketSecrets)] || srcs[bus.KVStream(bus.BucketDeployments)] {
		t.Errorf("AUDIT sources %v: want the replicasets and daemonsets buckets, not secrets nor the unprovisioned deployments", srcs)
	}
	for _, b := range []string{bus.BucketReplicaSets, bus.BucketSecrets} {
		kv, err := c.JS.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Create(ctx, "default.x", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	bustest.Eventually(t, 10*time.Second, func() bool {
		return len(bustest.Messages(t, c, bus.StreamAudit, bus.SubjKV(bus.BucketReplicaSets)+">")) == 1
	}, "AUDIT lacks the ReplicaSet's write")
	if n := len(bustest.Messages(t, c, bus.StreamAudit, bus.SubjKV(bus.BucketSecrets)+">")); n != 0 {
		t.Errorf("AUDIT has %d Secret records", n)
	}
}
