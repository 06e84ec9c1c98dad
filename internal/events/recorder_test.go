package events

import (
	"encoding/hex"
	"hash/fnv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// An event's id names it and de-duplicates it: it must not change from one build to the next, or a
// step redelivered across an upgrade would record its event twice.
func TestEventID(t *testing.T) {
	tests := [][]string{
		{"", "", "", "", ""},
		{"u1", "web", "Scheduled", "default-scheduler", "node-1"},
		{"3f2a", "db-0", "Pulled", "kubelet", "app\x00x"},
	}
	for _, parts := range tests {
		h := fnv.New64a()
		for _, s := range parts {
			_, _ = h.Write([]byte(s))
			_, _ = h.Write([]byte{0})
		}
		if got, want := eventID(parts...), hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("eventID(%q) = %s, want %s", parts, got, want)
		}
	}
}

type capture struct {
	subject string
	ev      *pb.Event
	meta    bus.Meta
}

func (c *capture) PublishAsync(subject string, m proto.Message, meta bus.Meta) (jetstream.PubAckFuture, error) {
	c.subject, c.ev, c.meta = subject, m.(*pb.Event), meta
	return nil, nil
}

func TestEvent(t *testing.T) {
	var c capture
	r := NewRecorder(&c, "kubelet", "node-1")
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	ref := &pb.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", Uid: "u1"}
	if _, err := r.Event(ref, "Normal", "Started", "Started container app", "app", at); err != nil {
		t.Fatal(err)
	}
	id := eventID("u1", "web", "Started", "kubelet", "app")
	if c.subject != bus.SubjEvent("default", "web") {
		t.Errorf("subject %s", c.subject)
	}
	if c.meta.MsgID != "ev-"+id || c.meta.PodUID != "u1" {
		t.Errorf("meta %+v", c.meta)
	}
	ts := timestamppb.New(at)
	want := &pb.Event{
		Metadata:       &pb.ObjectMeta{Name: "web." + id, Namespace: "default", Uid: id, CreationTimestamp: ts},
		InvolvedObject: ref, Reason: "Started", Message: "Started container app",
		Source:         &pb.EventSource{Component: "kubelet", Host: "node-1"},
		FirstTimestamp: ts, LastTimestamp: ts, Count: 1, Type: "Normal",
		ReportingComponent: "kubelet", ReportingInstance: "node-1",
	}
	if d := cmp.Diff(want, c.ev, protocmp.Transform()); d != "" {
		t.Errorf("event (-want +got):\n%s", d)
	}
}

func BenchmarkEventID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = eventID("8b0d3f0e-6c2e-4a57-9d1e-5a1b2c3d4e5f", "web-12345", "Started", "kubelet", "app")
	}
}
