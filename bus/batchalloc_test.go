package bus

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// benchBatch is a stored batch of n pod.created-like entries, each with the headers the pipeline's
// publishers give them.
func benchBatch(n int) (nats.Header, []byte) {
	group := make([]*batchItem, n)
	for i := range group {
		group[i] = &batchItem{subject: SubjPodScheduled, data: make([]byte, 600), meta: Meta{MsgID: "created-0b6c1f5e-2a3d-4e7f-9a1b-000000000001",
			Correlation: "9f8e7d6c-5b4a-4321-8765-000000000001", PodUID: "0b6c1f5e-2a3d-4e7f-9a1b-000000000001", Key: "default/pod-1",
			Actor: "store/0"}}
	}
	msg := packBatch(SubjPodScheduled, "store/0", group)
	return msg.Header, msg.Data
}

// BenchmarkUnbatch: reading a stored batch of 16 entries, as every consumer of a batched stream does.
func BenchmarkUnbatch(b *testing.B) {
	h, data := benchBatch(16)
	b.ReportAllocs()
	for b.Loop() {
		entries, err := Unbatch(SubjPodScheduled, h, data)
		if err != nil || len(entries) != 16 {
			b.Fatal(len(entries), err)
		}
	}
}

// BenchmarkWrap: a message's headers built for publishing.
func BenchmarkWrap(b *testing.B) {
	meta := Meta{MsgID: "created-0b6c1f5e", Correlation: "9f8e7d6c", PodUID: "0b6c1f5e", Key: "default/pod-1"}
	data := make([]byte, 600)
	b.ReportAllocs()
	for b.Loop() {
		if m := wrap("store/0", SubjPodScheduled, data, meta); len(m.Header) != 5 {
			b.Fatal(m.Header)
		}
	}
}
