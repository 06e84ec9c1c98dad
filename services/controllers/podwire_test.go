package controllers

import (
	"reflect"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/internal/podfields"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A pod's head read from the wire is the one the decoder gives, whichever fields it has.
func TestWireHeadMatchesDecode(t *testing.T) {
	no := false
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	encode := func(p *pb.Pod) []byte {
		data, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	// A label entry after the others repeats a key: the map keeps the later value.
	dupMeta := encode(&pb.Pod{Metadata: daemonSetPod(1).Metadata})
	inner, _ := protowire.ConsumeBytes(dupMeta[1:])
	inner = append(append([]byte{}, inner...), field(podfields.MetaLabels, append(field(1, []byte("app")), field(2, []byte("later"))...))...)
	for name, data := range map[string][]byte{
		"a DaemonSet's pod": encode(daemonSetPod(3)),
		"deleting":          encode(daemonSetPod(3, deletingPod)),
		"unbound":           encode(daemonSetPod(3, unbound)),
		"two owners": encode(daemonSetPod(3, func(p *pb.Pod) {
			p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, &pb.OwnerReference{ApiVersion: "v1", Kind: "ConfigMap", Name: "cm", Uid: "cm-uid", Controller: &no})
		})),
		"an empty owner":       encode(daemonSetPod(3, func(p *pb.Pod) { p.Metadata.OwnerReferences = []*pb.OwnerReference{{}} })),
		"no labels":            encode(daemonSetPod(3, func(p *pb.Pod) { p.Metadata.Labels = nil })),
		"no metadata":          encode(&pb.Pod{Spec: &pb.PodSpec{NodeName: "n"}}),
		"an empty pod":         {},
		"a repeated label":     field(podfields.PodMeta, inner),
		"deleted at the epoch": encode(daemonSetPod(3, func(p *pb.Pod) { p.Metadata.DeletionTimestamp = &timestamppb.Timestamp{} })),
	} {
		t.Run(name, func(t *testing.T) {
			c := newCache()
			meta, labels, ok := c.wireHead(data)
			if !ok {
				t.Fatal("not read from the wire")
			}
			wantMeta, wantLabels, ok := c.decodeHead(data)
			if !ok {
				t.Fatal("not decoded")
			}
			if !reflect.DeepEqual(meta, wantMeta) || !slices.Equal(labels, wantLabels) {
				t.Errorf("from the wire %+v %v\ndecoded       %+v %v", meta, labels, wantMeta, wantLabels)
			}
		})
	}
}

// Forms an encoder does not write go to the decoder.
func TestWireHeadLeavesOddFormsToTheDecoder(t *testing.T) {
	data, err := proto.Marshal(daemonSetPod(3))
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := proto.Marshal(&pb.ObjectMeta{Name: "other"})
	bad := protowire.AppendBytes(protowire.AppendTag(nil, podfields.MetaName, protowire.BytesType), []byte{0xff})
	for name, in := range map[string][]byte{
		"metadata twice (merged)":  append(append([]byte{}, data...), protowire.AppendBytes(protowire.AppendTag(nil, podfields.PodMeta, protowire.BytesType), meta)...),
		"a name that is not UTF-8": protowire.AppendBytes(protowire.AppendTag(nil, podfields.PodMeta, protowire.BytesType), bad),
		"a truncated pod":          data[:len(data)-1],
	} {
		c := newCache()
		if _, _, ok := c.wireHead(in); ok {
			t.Errorf("%s: read from the wire", name)
		}
	}
}

// Whatever the bytes, a head read from the wire is the one the decoder gives.
func FuzzWireHead(f *testing.F) {
	data, err := proto.Marshal(daemonSetPod(3, deletingPod))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		c := newCache()
		meta, labels, ok := c.wireHead(data)
		if !ok {
			return
		}
		wantMeta, wantLabels, ok := c.decodeHead(data)
		if !ok || !reflect.DeepEqual(meta, wantMeta) || !slices.Equal(labels, wantLabels) {
			t.Fatalf("from the wire %+v %v\ndecoded (%t) %+v %v", meta, labels, ok, wantMeta, wantLabels)
		}
	})
}

// go test -run XXX -bench WireHead ./services/controllers/: a DaemonSet's pod's head from the wire and
// through the decoder.
func BenchmarkWireHead(b *testing.B) {
	data, err := proto.Marshal(daemonSetPod(3))
	if err != nil {
		b.Fatal(err)
	}
	c := newCache()
	for _, bc := range []struct {
		name string
		read func([]byte) (bool, int)
	}{
		{"wire", func(d []byte) (bool, int) { m, l, ok := c.wireHead(d); return ok, len(m.Name) + len(l) }},
		{"decoder", func(d []byte) (bool, int) { m, l, ok := c.decodeHead(d); return ok, len(m.Name) + len(l) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ok, _ := bc.read(data); !ok {
					b.Fatal("not read")
				}
			}
		})
	}
}
