package bus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The hand-written batch encoder writes what the generated code reads: each entry's payload, its
// headers without the actor, and its own subject when it is not the batch's; empty payloads and
// headers included.
func TestAppendBatchIsABatch(t *testing.T) {
	item := func(subject string, data []byte, meta Meta) *batchItem {
		return &batchItem{subject: subject, data: data, meta: meta}
	}
	group := []*batchItem{
		item("event.ns", []byte("one"), Meta{Actor: "binder/b", MsgID: "ev-1", PodUID: "u1"}),
		item("event.ns.web", []byte{}, Meta{Actor: "binder/b", Key: "ns/web"}),
		item("event.ns.db", make([]byte, 300), Meta{}),
	}
	var got pb.Batch
	if err := proto.Unmarshal(appendBatch(nil, "event.ns", group), &got); err != nil {
		t.Fatal(err)
	}
	want := &pb.Batch{Entries: []*pb.BatchEntry{
		{Data: []byte("one"), Headers: map[string]string{HdrMsgID: "ev-1", HdrPodUID: "u1"}},
		{Headers: map[string]string{HdrKey: "ns/web", HdrSubject: "event.ns.web"}},
		{Data: make([]byte, 300), Headers: map[string]string{HdrSubject: "event.ns.db"}},
	}}
	if d := cmp.Diff(want, &got, protocmp.Transform()); d != "" {
		t.Errorf("batch (-want +got):\n%s", d)
	}
	// Read back, each entry has its own headers under the batch's, as a message of its own would.
	packed := packBatch("event.ns", "binder/b", group)
	entries, err := Unbatch("event.ns", packed.Header, packed.Data)
	if err != nil || len(entries) != len(group) {
		t.Fatalf("unbatch: %d entries, %v", len(entries), err)
	}
	for i, e := range entries {
		alone := group[i].message()
		alone.Header.Set(HdrActor, "binder/b")
		if e.Subject != alone.Subject || string(e.Data) != string(alone.Data) || MetaFrom(e.Header) != MetaFrom(alone.Header) {
			t.Errorf("entry %d: %s %q %+v, alone %s %q %+v", i, e.Subject, e.Data, MetaFrom(e.Header), alone.Subject, alone.Data, MetaFrom(alone.Header))
		}
	}
}
