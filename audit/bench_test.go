package audit_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/auditseal"
)

// BenchmarkAudit builds a history of PODBUS_AUDIT_RECORDS records (default 200,000; 11 per pod, the
// seed flow's messages, bucket writes and events, published straight to the streams), then measures a
// JSON replay of all of it to io.Discard (records/s), the same with the chain verified on the way against
// the seals of a sealer run over it (records/s), and the timeline of one pod in the middle.
func BenchmarkAudit(b *testing.B) {
	want := 200_000
	if s := os.Getenv("PODBUS_AUDIT_RECORDS"); s != "" {
		want, _ = strconv.Atoi(s)
	}
	_, c := bustest.Start(b)
	ctx := context.Background()
	start := time.Now()
	pods := want / 11
	publishHistory(b, c, pods)
	total := waitAudit(b, c, uint64(pods*11))
	b.Logf("history: %d records (%d pods) generated and sourced in %s", total, pods, time.Since(start).Round(time.Millisecond))

	b.Run("replay-json", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			n, err := audit.Replay(ctx, c.JS, audit.ReplayOptions{Format: audit.FormatJSON}, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			if uint64(n) != total {
				b.Fatalf("replayed %d of %d", n, total)
			}
			b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "records/s")
		}
	})
	b.Run("replay-json-chain", func(b *testing.B) {
		t0 := time.Now()
		pub := sealAll(b, c, total)
		b.Logf("sealed %d records in %s", total, time.Since(t0).Round(time.Millisecond))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			n, res, err := audit.ReplayVerified(ctx, c.JS, audit.ReplayOptions{Format: audit.FormatJSON},
				audit.ChainOptions{PublicKeys: []ed25519.PublicKey{pub}}, io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			if uint64(n) != total || uint64(res.Sealed) != total {
				b.Fatalf("replayed %d of %d, %d checked against seals", n, total, res.Sealed)
			}
			b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "records/s")
		}
	})
	b.Run("timeline", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			incs, err := audit.Timeline(ctx, c.JS, audit.TimelineOptions{Namespace: "default", Name: fmt.Sprintf("p-%d", pods/2)})
			if err != nil {
				b.Fatal(err)
			}
			if len(incs) != 1 || len(incs[0].Steps) != 11 {
				b.Fatalf("timeline: %d incarnations, %v", len(incs), incs)
			}
		}
	})
}

func publishHistory(b *testing.B, c *bus.Conn, pods int) {
	js := c.JS
	var futures []jetstream.PubAckFuture
	pub := func(subject string, m proto.Message, h nats.Header) {
		data, _ := proto.Marshal(m)
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: data, Header: h})
		if err != nil {
			b.Fatal(err)
		}
		futures = append(futures, f)
		if len(futures) >= 2000 {
			for _, f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
			futures = futures[:0]
		}
	}
	for i := 0; i < pods; i++ {
		name, uid, node := fmt.Sprintf("p-%d", i), fmt.Sprintf("uid-%d", i), fmt.Sprintf("node-%d", i%100)
		h := func(actor string) nats.Header {
			return nats.Header{bus.HdrActor: {actor}, bus.HdrPodUID: {uid}, bus.HdrKey: {"default/" + name}, bus.HdrCorrelation: {uid}}
		}
		pod := &pb.Pod{
			Metadata: &pb.ObjectMeta{Name: name, Namespace: "default", Uid: uid, CreationTimestamp: timestamppb.Now(), Labels: map[string]string{"app": "bench"}},
			Spec: &pb.PodSpec{Containers: []*pb.Container{{Name: "app", Image: "example.local/app:1",
				Resources: &pb.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "128Mi"}}}}},
			Status: &pb.PodStatus{Phase: "Pending", QosClass: "Burstable"},
		}
		kv := bus.SubjKV(bus.BucketPods) + bus.PodKey("default", name)
		pub(bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, Pod: pod, User: "alice"}, h("admission/api-0"))
		pub(kv, pod, nil)
		pub(bus.SubjPodPending, &pb.PendingPod{Pod: pod, Revision: 1, Cause: "created"}, h("store/store-0"))
		pub(bus.SubjPodScheduled, &pb.SchedulingDecision{Uid: uid, Namespace: "default", Name: name, Node: node, Score: 90, NodesEvaluated: 100}, h("scheduler/sched-0"))
		pod.Spec.NodeName = node
		pub(kv, pod, nil)
		pub(bus.SubjPodBound(node), &pb.PodBinding{Pod: pod, Node: node}, h("binder/binder-0"))
		pub(bus.SubjEvent("default", name), &pb.Event{Reason: "Scheduled", Message: "Successfully assigned"}, h("binder/binder-0"))
		st := &pb.PodStatus{Phase: "Running", PodIp: "10.42.0.7", Conditions: []*pb.PodCondition{{Type: podutil.PodReady, Status: podutil.True}}}
		pub(bus.SubjPodStatus(node), &pb.PodStatusReport{Uid: uid, Namespace: "default", Name: name, Node: node, Seq: 1, Status: st}, h("agent/"+node))
		pod.Status = st
		pub(kv, pod, nil)
		pub(bus.SubjEvent("default", name), &pb.Event{Reason: "Pulled"}, h("status/status-0"))
		pub(bus.SubjEvent("default", name), &pb.Event{Reason: "Started"}, h("status/status-0"))
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
}

// sealAll runs a sealer until the first total records of AUDIT are sealed and returns its key.
func sealAll(b *testing.B, c *bus.Conn, total uint64) ed25519.PublicKey {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := auditseal.New(auditseal.Config{ID: "bench", Key: key}, c)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}()
	bustest.Eventually(b, 5*time.Minute, func() bool {
		blk, err := lastSeal(ctx, c)
		return err == nil && blk.To() >= total
	}, "the sealer seals the history")
	return pub
}

func waitAudit(b *testing.B, c *bus.Conn, want uint64) uint64 {
	ctx := context.Background()
	s, err := c.JS.Stream(ctx, bus.StreamAudit)
	if err != nil {
		b.Fatal(err)
	}
	var got uint64
	bustest.Eventually(b, 5*time.Minute, func() bool {
		si, err := s.Info(ctx)
		if err == nil {
			got = si.State.Msgs
		}
		return got >= want
	}, "AUDIT has the history")
	return got
}
