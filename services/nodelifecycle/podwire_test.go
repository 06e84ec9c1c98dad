package nodelifecycle

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/internal/podfields"
	"github.com/podbus/podbus/internal/podtest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func bytesField(num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
}

// A plain pod's head read from the wire is the one the decoder gives.
func TestWirePodHeadMatchesDecode(t *testing.T) {
	encode := func(p *pb.Pod) []byte {
		data, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	deleting := podtest.RunningPod(1)
	deleting.Metadata.DeletionTimestamp = timestamppb.Now()
	unbound := podtest.RunningPod(2)
	unbound.Spec.NodeName, unbound.Internal = "", nil
	epoch := podtest.RunningPod(3)
	epoch.Metadata.DeletionTimestamp = &timestamppb.Timestamp{}
	// A later name replaces an earlier one, in the decoder as on the wire.
	meta, _ := proto.Marshal(podtest.RunningPod(4).GetMetadata())
	renamed := bytesField(podfields.PodMeta, append(meta, bytesField(podfields.MetaName, []byte("later"))...))
	for name, data := range map[string][]byte{
		"running":              encode(podtest.RunningPod(0)),
		"deleting":             encode(deleting),
		"deleted at the epoch": encode(epoch),
		"unbound":              encode(unbound),
		"no metadata":          encode(&pb.Pod{Spec: &pb.PodSpec{NodeName: "n"}}),
		"empty":                {},
		"a name given twice":   renamed,
	} {
		t.Run(name, func(t *testing.T) {
			h, ok := wirePodHead(data)
			if !ok {
				t.Fatal("not read from the wire")
			}
			want, ok := decodePodHead(data)
			if !ok {
				t.Fatal("not decoded")
			}
			if !sameHead(h, want) {
				t.Errorf("from the wire %s\ndecoded       %s", h, want)
			}
		})
	}
}

// Forms an encoder does not write go to the decoder.
func TestWirePodHeadLeavesOddFormsToTheDecoder(t *testing.T) {
	data, err := proto.Marshal(podtest.RunningPod(0))
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := proto.Marshal(&pb.PodSpec{NodeName: "other"})
	ts, _ := proto.Marshal(timestamppb.Now())
	twoDeletions := bytesField(podfields.PodMeta, append(bytesField(podfields.MetaDeleted, ts), bytesField(podfields.MetaDeleted, ts)...))
	for name, in := range map[string][]byte{
		"spec twice (merged)":        append(append([]byte{}, data...), bytesField(podfields.PodSpec, spec)...),
		"a deletion time twice":      twoDeletions,
		"a uid that is not UTF-8":    bytesField(podfields.PodMeta, bytesField(podfields.MetaUID, []byte{0xff})),
		"a node of the wrong type":   bytesField(podfields.PodSpec, protowire.AppendVarint(protowire.AppendTag(nil, podfields.SpecNode, protowire.VarintType), 1)),
		"metadata of the wrong type": protowire.AppendVarint(protowire.AppendTag(nil, podfields.PodMeta, protowire.VarintType), 1),
		"a truncated pod":            data[:len(data)-1],
	} {
		if _, ok := wirePodHead(in); ok {
			t.Errorf("%s: read from the wire", name)
		}
	}
}

// Whatever the bytes, a head read from the wire is the one the decoder gives.
func FuzzWirePodHead(f *testing.F) {
	p := podtest.RunningPod(0)
	p.Metadata.DeletionTimestamp = timestamppb.Now()
	data, err := proto.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		h, ok := wirePodHead(data)
		if !ok {
			return
		}
		want, ok := decodePodHead(data)
		if !ok || !sameHead(h, want) {
			t.Fatalf("from the wire %s\ndecoded (%t) %s", h, ok, want)
		}
	})
}

func sameHead(a, b podHead) bool {
	str := func(h podHead) [5]string {
		return [5]string{string(h.uid), string(h.name), string(h.ns), string(h.node), string(h.corr)}
	}
	return str(a) == str(b) && a.deleting == b.deleting
}

func (h podHead) String() string {
	return "uid=" + string(h.uid) + " name=" + string(h.name) + " ns=" + string(h.ns) + " node=" + string(h.node) +
		" corr=" + string(h.corr) + map[bool]string{true: " deleting", false: ""}[h.deleting]
}

// A pod change costs the cache's watch no allocation but the cached pod's own strings.
func TestWirePodHeadAllocations(t *testing.T) {
	data, err := proto.Marshal(podtest.RunningPod(0))
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = wirePodHead(data) }); n != 0 {
		t.Errorf("%v allocations reading a pod's head", n)
	}
}

// go test -run XXX -bench PodHead ./services/nodelifecycle/: a running pod's head from the wire and
// through the decoder.
func BenchmarkPodHead(b *testing.B) {
	data, err := proto.Marshal(podtest.RunningPod(0))
	if err != nil {
		b.Fatal(err)
	}
	for name, read := range map[string]func([]byte) (podHead, bool){"wire": wirePodHead, "decoder": decodePodHead} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := read(data); !ok {
					b.Fatal("not read")
				}
			}
		})
	}
}
