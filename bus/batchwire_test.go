package bus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The hand-written batch encoder writes what the generated code reads: each entry's payload, its
// headers without the actor, and its own subject when it is not the batch's; empty payloads and
// headers included.
func TestAppendBatchIsABatch(t *testing.T) {
	item := func(subject string, data []byte, hdr nats.Header) *batchItem {
		return &batchItem{msg: &nats.Msg{Subject: subject, Data: data, Header: hdr}}
	}
	group := []*batchItem{
		item("event.ns", []byte("one"), nats.Header{HdrActor: {"binder/b"}, HdrMsgID: {"ev-1"}, HdrPodUID: {"u1"}}),
		item("event.ns.web", []byte{}, nats.Header{HdrActor: {"binder/b"}, HdrKey: {"ns/web"}, "Empty": {""}}),
		item("event.ns.db", make([]byte, 300), nil),
	}
	var got pb.Batch
	if err := proto.Unmarshal(appendBatch(nil, "event.ns", group), &got); err != nil {
		t.Fatal(err)
	}
	want := &pb.Batch{Entries: []*pb.BatchEntry{
		{Data: []byte("one"), Headers: map[string]string{HdrMsgID: "ev-1", HdrPodUID: "u1"}},
		{Headers: map[string]string{HdrKey: "ns/web", "Empty": "", HdrSubject: "event.ns.web"}},
		{Data: make([]byte, 300), Headers: map[string]string{HdrSubject: "event.ns.db"}},
	}}
	if d := cmp.Diff(want, &got, protocmp.Transform()); d != "" {
		t.Errorf("batch (-want +got):\n%s", d)
	}
}
