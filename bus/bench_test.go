package bus_test

import (
	"context"
	"testing"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The raw JetStream costs the pipeline is built from, on an embedded file-backed server: a durable
// publish (one pipeline step) and a compare-and-set KV update (one store write). `make bench` prints them.
func BenchmarkPublishSync(b *testing.B) {
	_, c := bustest.Start(b)
	pub := bus.NewPublisher(c.JS, "bench")
	msg := &pb.PodDeleted{Uid: "0b9c7e0e-1f1e-4c55-9a3e-5d2b7c0d9a11", Namespace: "default", Name: "web", Node: "node-1"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := pub.Publish(ctx, bus.SubjPodDeleted, msg, bus.Meta{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKVCompareAndSet(b *testing.B) {
	_, c := bustest.Start(b)
	ctx := context.Background()
	bk, err := bus.OpenBuckets(ctx, c.JS)
	if err != nil {
		b.Fatal(err)
	}
	pod := &pb.Pod{Metadata: &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u"}}
	key := bus.PodKey("default", "web")
	rev, err := bus.Create(ctx, bk.Pods, key, pod)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rev, err = bus.Update(ctx, bk.Pods, key, pod, rev); err != nil {
			b.Fatal(err)
		}
	}
}
