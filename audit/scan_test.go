package audit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/events"

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

// Events in their namespace's batches read by one object's subject: Scan reads the batches too and
// keeps the entries on that subject, each under its own subject.
func TestScanFindsEventsInNamespaceBatches(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := events.NewRecorder(bus.NewBatcher(c.JS, "binder/b"), "default-scheduler", "b")
	var futures []jetstream.PubAckFuture
	for i := range 40 {
		name := fmt.Sprintf("p%d", i%10) // four events per pod, all at once
		f, err := rec.Event(&pb.ObjectReference{Kind: "Pod", Namespace: "default", Name: name, Uid: name}, "Normal", "Scheduled", fmt.Sprint(i), fmt.Sprint(i), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		t.Fatal(err)
	}
	var got []string
	batched := false
	err := audit.Scan(ctx, c.JS, audit.ScanOptions{Stream: bus.StreamEvents, Filters: []string{bus.SubjEvent("default", "p3")}}, func(r *audit.Record) error {
		m, err := r.Decode()
		if err != nil {
			return err
		}
		got = append(got, r.Subject+" "+m.(*pb.Event).GetMessage())
		batched = batched || r.Index > 0
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "event.default.p3 3|event.default.p3 13|event.default.p3 23|event.default.p3 33"; strings.Join(got, "|") != want || !batched {
		t.Errorf("read %q (batched: %v), want %q from batches", strings.Join(got, "|"), batched, want)
	}
}
