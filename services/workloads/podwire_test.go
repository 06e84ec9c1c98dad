package workloads

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/internal/podfields"
)

// Forms of a pod an encoder does not write are left to the decoder, which reads them as it always
// has: the cache holds what decoding gives, whichever way the pod came.
func TestWireCachedLeavesOddFormsToTheDecoder(t *testing.T) {
	p := runningPod(t, 3)
	data, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := proto.Marshal(p.GetMetadata())
	status, _ := proto.Marshal(p.GetStatus())
	bytesField := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	varintField := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	for _, tc := range []struct {
		name      string
		data      []byte
		malformed bool
	}{
		{"metadata twice (merged)", append(append([]byte{}, data...), bytesField(podfields.PodMeta, bytesField(podfields.MetaName, []byte("renamed")))...), false},
		{"status twice (merged)", append(append([]byte{}, data...), bytesField(podfields.PodStatus, status)...), false},
		{"metadata as a varint", append(varintField(podfields.PodMeta, 1), data...), false},
		{"a name that is not UTF-8", bytesField(podfields.PodMeta, append(append([]byte{}, meta...), bytesField(podfields.MetaName, []byte{0xff, 0xfe})...)), true},
		{"a label value that is not UTF-8", bytesField(podfields.PodMeta, bytesField(podfields.MetaLabels, append(bytesField(1, []byte("app")), bytesField(2, []byte{0xc3})...))), true},
		{"a truncated pod", data[:len(data)-3], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := wireCached(tc.data); ok {
				t.Fatal("read from the wire")
			}
			d, dok := decodeProto(tc.data)
			c, ok := decodeCached(tc.data)
			if ok == tc.malformed || dok != ok || !reflect.DeepEqual(c, d) {
				t.Errorf("decodeCached %t %+v, the decoder %t %+v, malformed %t", ok, c, dok, d, tc.malformed)
			}
		})
	}
}

// Whatever the bytes, a pod read from the wire is the pod the decoder reads.
func FuzzWireCached(f *testing.F) {
	p := runningPod(f, 3)
	data, err := proto.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(append(append([]byte{}, data...), data...))
	p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, p.Metadata.OwnerReferences...)
	p.Status.ContainerStatuses = nil
	more, _ := proto.Marshal(p)
	f.Add(more)
	f.Fuzz(func(t *testing.T, data []byte) {
		w, ok := wireCached(data)
		if !ok {
			return
		}
		d, dok := decodeProto(data)
		if !dok || !reflect.DeepEqual(w, d) {
			t.Fatalf("read from the wire %+v\ndecoded (%t)    %+v", w, dok, d)
		}
	})
}

// go test -run XXX -bench DecodeCached ./services/workloads/: a running pod of a ReplicaSet as the
// cache reads it, from the wire and through the decoder.
func BenchmarkDecodeCached(b *testing.B) {
	data, err := proto.Marshal(runningPod(b, 3))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		read func([]byte) (*cachedPod, bool)
	}{{"wire", wireCached}, {"decoder", decodeProto}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := bc.read(data); !ok {
					b.Fatal("not read")
				}
			}
		})
	}
}
