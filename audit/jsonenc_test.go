package audit

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// TestAppendProtoJSONMatchesProtojson fills every podbus message type with random values (escapes,
// non-ASCII, unknown enum numbers, extreme integers, zero-valued optional fields, maps) and checks
// the fast encoder writes what protojson writes, up to protojson's random whitespace.
func TestAppendProtoJSONMatchesProtojson(t *testing.T) {
	msgs := pb.File_podbus_proto.Messages()
	for i := 0; i < msgs.Len(); i++ {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(msgs.Get(i).FullName())
		if err != nil {
			t.Fatal(err)
		}
		t.Run(string(mt.Descriptor().Name()), func(t *testing.T) {
			for seed := uint64(0); seed < 40; seed++ {
				m := mt.New()
				fill(rand.New(rand.NewPCG(seed, uint64(i))), m, 0)
				checkSameJSON(t, m.Interface())
			}
		})
	}
	if compared < msgs.Len()*20 {
		t.Fatalf("only %d of %d messages compared; the rest failed in both", compared, msgs.Len()*40)
	}
}

func TestAppendProtoJSONEdges(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    proto.Message
	}{
		{"empty", &pb.Pod{}},
		{"time without fraction", &pb.ObjectMeta{CreationTimestamp: &timestamppb.Timestamp{Seconds: 1}}},
		{"time in ms", &pb.ObjectMeta{CreationTimestamp: &timestamppb.Timestamp{Seconds: 1, Nanos: 5e8}}},
		{"time in µs", &pb.ObjectMeta{CreationTimestamp: &timestamppb.Timestamp{Seconds: 1, Nanos: 1000}}},
		{"time in ns", &pb.ObjectMeta{CreationTimestamp: &timestamppb.Timestamp{Seconds: -1, Nanos: 7}}},
		{"time out of range", &pb.ObjectMeta{CreationTimestamp: &timestamppb.Timestamp{Seconds: math.MaxInt64}}},
		{"zero time", &pb.ObjectMeta{CreationTimestamp: &timestamppb.Timestamp{}}},
		{"control characters", &pb.Event{Reason: "\x00\x01\x1f\b\f\n\r\t\"\\\x7f<>&\u2028é"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkSameJSON(t, tc.m) })
	}
}

func checkSameJSON(t *testing.T, m proto.Message) {
	t.Helper()
	want, werr := protojson.MarshalOptions{}.Marshal(m)
	got, gerr := appendProtoJSON([]byte("prefix"), m)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("errors differ: protojson %v, fast %v", werr, gerr)
	}
	if werr != nil {
		return
	}
	compared++
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("lost the prefix: %s", got)
	}
	// Compacted both: protojson's random spaces depend on the binary, and messages the fast encoder
	// leaves to protojson have them too.
	var w, g bytes.Buffer
	if err := json.Compact(&w, want); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&g, got[len("prefix"):]); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if !bytes.Equal(g.Bytes(), w.Bytes()) {
		t.Fatalf("differ:\nprotojson %s\nfast      %s", w.Bytes(), g.Bytes())
	}
}

var compared int // successful comparisons, so the random fill cannot make the test vacuous

var fillStrings = []string{"", "a", "default/p-1", "é\u2028\"\\\n\x01", "100m", "zz", "A b"}

// fill sets a random subset of m's fields (all of them at depth 0 for half the seeds).
func fill(r *rand.Rand, m protoreflect.Message, depth int) {
	if ts, ok := m.Interface().(*timestamppb.Timestamp); ok && r.IntN(8) > 0 { // mostly valid times
		ts.Seconds = []int64{0, 1, -1, 1764600000, maxTimestampSeconds}[r.IntN(5)]
		ts.Nanos = []int32{0, 1, 5e8, 123456000, 999999999}[r.IntN(5)]
		return
	}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if r.IntN(3) == 0 || (fd.Kind() == protoreflect.MessageKind && depth > 4) {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for n := r.IntN(3); n > 0; n-- {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fill(r, e.Message(), depth+1)
					l.Append(e)
				} else {
					l.Append(scalar(r, fd))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for n := r.IntN(4); n > 0; n-- {
				k := scalar(r, fd.MapKey()).MapKey()
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v := mp.NewValue()
					fill(r, v.Message(), depth+1)
					mp.Set(k, v)
				} else {
					mp.Set(k, scalar(r, fd.MapValue()))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill(r, m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, scalar(r, fd))
		}
	}
}

func scalar(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	ints := []int64{0, 1, -1, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64, 123456789}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fillStrings[r.IntN(len(fillStrings))])
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(ints[r.IntN(len(ints))]))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(ints[r.IntN(len(ints))])
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(ints[r.IntN(len(ints))]))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(ints[r.IntN(len(ints))]))
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if r.IntN(4) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(vals.Len() + 40)) // unknown
		}
		return protoreflect.ValueOfEnum(vals.Get(r.IntN(vals.Len())).Number())
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(r.NormFloat64()))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(r.NormFloat64() * 1e22)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{0, 1, 2, byte(r.IntN(256))})
	}
	panic("kind " + fd.Kind().String())
}

func TestOrigin(t *testing.T) {
	for _, tc := range []struct {
		hdr    string
		stream string
		seq    uint64
		ok     bool
	}{
		{"", "", 0, false},
		{"PODS", "", 0, false},
		{"PODS 12", "PODS", 12, true},
		{"PODS 12 > > pod.>", "PODS", 12, true},
		{"  KV_pods\t7  x", "KV_pods", 7, true},
		{"PODS x", "", 0, false},
		{"PODS -1", "", 0, false},
	} {
		r := &Record{Header: nats.Header{hdrStreamSource: {tc.hdr}}}
		stream, seq, ok := r.Origin()
		if stream != tc.stream || seq != tc.seq || ok != tc.ok {
			t.Errorf("Origin(%q) = %q, %d, %v; want %q, %d, %v", tc.hdr, stream, seq, ok, tc.stream, tc.seq, tc.ok)
		}
	}
}
