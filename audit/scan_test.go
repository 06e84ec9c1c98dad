package audit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A batch in the log reads as one record per entry: the batch's sequence, the entry's index, its own
// headers and payload, and the publisher of the batch.
func TestScanUnpacksBatches(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := bus.NewBatcher(c.JS, "scheduler/a")
	const n = 50
	var futures []jetstream.PubAckFuture
	for i := range n {
		uid := fmt.Sprintf("u%d", i)
		f, err := b.PublishAsync(bus.SubjPodScheduled, &pb.SchedulingDecision{Uid: uid, Node: "n1"}, bus.Meta{PodUID: uid})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		t.Fatal(err)
	}
	var recs []audit.Record
	bustest.Eventually(t, 10*time.Second, func() bool {
		recs = recs[:0]
		err := audit.Scan(ctx, c.JS, audit.ScanOptions{Filters: []string{bus.SubjPodScheduled}}, func(r *audit.Record) error {
			recs = append(recs, *r)
			return nil
		})
		return err == nil && len(recs) == n
	}, "the AUDIT stream holds %d decisions (%d read)", n, len(recs))

	batched := 0
	for i, r := range recs {
		m, err := r.Decode()
		if err != nil {
			t.Fatal(err)
		}
		uid := fmt.Sprintf("u%d", i)
		if d := m.(*pb.SchedulingDecision); d.GetUid() != uid || r.UID() != uid || r.Actor() != "scheduler/a" {
			t.Fatalf("record %d: decision %v, uid header %q, actor %q", i, d, r.UID(), r.Actor())
		}
		if i > 0 && r.Seq == recs[i-1].Seq {
			batched++
			if r.Index != recs[i-1].Index+1 {
				t.Errorf("record %d: index %d after %d in batch %d", i, r.Index, recs[i-1].Index, r.Seq)
			}
			line, err := audit.AppendJSON(nil, &r)
			if err != nil || !strings.Contains(string(line), fmt.Sprintf(`"index":%d`, r.Index)) {
				t.Errorf("JSON of a batch entry does not name its index: %s (%v)", line, err)
			}
		}
	}
	if batched == 0 {
		t.Errorf("%d decisions queued at once were all stored alone", n)
	}
}
