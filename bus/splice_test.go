package bus

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A spliced message reads back as the one encoded whole, and Field finds the spliced bytes again
// (as the scheduler takes the pod of a pending message into its decision).
func TestSpliceAndField(t *testing.T) {
	pod := &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1", Labels: map[string]string{"app": "web"}},
		Spec:     &pb.PodSpec{NodeName: "n1", Containers: []*pb.Container{{Name: "c", Image: "busybox"}}},
	}
	raw, err := proto.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	podField := FieldNumber(&pb.PendingPod{}, "pod")
	tests := []struct {
		name string
		msg  *pb.PendingPod // without its pod
	}{
		{"fields before and after the pod's number", &pb.PendingPod{Revision: 7, Cause: "created"}},
		{"nothing but the pod", &pb.PendingPod{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := Splice(tt.msg, podField, raw)
			if err != nil {
				t.Fatal(err)
			}
			got := &pb.PendingPod{}
			if err := proto.Unmarshal(data, got); err != nil {
				t.Fatal(err)
			}
			want := proto.Clone(tt.msg).(*pb.PendingPod)
			want.Pod = pod
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("spliced message (-want +got):\n%s", diff)
			}
			back, ok := Field(data, podField)
			if !ok || string(back) != string(raw) {
				t.Errorf("Field = %d bytes, %v; want the %d spliced bytes", len(back), ok, len(raw))
			}
		})
	}
}

func TestFieldRefuses(t *testing.T) {
	podField := FieldNumber(&pb.PendingPod{}, "pod")
	whole, _ := proto.Marshal(&pb.PendingPod{Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Name: "a"}}, Revision: 3})
	twice := protowire.AppendBytes(protowire.AppendTag(whole, podField, protowire.BytesType), []byte{})
	tests := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"encoded whole", whole, true},
		{"absent", mustMarshal(t, &pb.PendingPod{Revision: 3}), false},
		{"twice (a reader merges the copies)", twice, false},
		{"cut short", whole[:len(whole)-1], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := Field(tt.data, podField); ok != tt.ok {
				t.Errorf("Field ok = %v, want %v", ok, tt.ok)
			}
		})
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ReplaceFields gives what decoding, setting the fields and encoding again gives, whatever the stored
// order, repetition or unknown fields of the message.
func TestReplaceFields(t *testing.T) {
	statusField, internalField := FieldNumber(&pb.Pod{}, "status"), FieldNumber(&pb.Pod{}, "internal")
	meta := &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1", Labels: map[string]string{"app": "web"}}
	spec := &pb.PodSpec{NodeName: "n1", Containers: []*pb.Container{{Name: "c", Image: "busybox"}}}
	enc := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	field := func(num protowire.Number, m proto.Message) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), enc(m))
	}
	whole := enc(&pb.Pod{Metadata: meta, Spec: spec, Status: &pb.PodStatus{Phase: "Pending", Reason: "old"},
		Internal: &pb.PodInternal{CorrelationId: "c1", ReportSeq: 3}})
	// Status stored first and twice (a reader merges the copies), and a field this build does not know.
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 5)
	scrambled := append(append(append(field(statusField, &pb.PodStatus{Phase: "Pending"}), field(1, meta)...),
		field(statusField, &pb.PodStatus{Reason: "old"})...), append(field(2, spec), unknown...)...)
	newStatus := &pb.PodStatus{Phase: "Running", PodIp: "10.42.0.9"}
	newInternal := &pb.PodInternal{CorrelationId: "c1", ReportSeq: 9}

	tests := []struct {
		name   string
		data   []byte
		fields []RawField
		want   *pb.Pod
	}{
		{"status and internal replaced", whole,
			[]RawField{{statusField, enc(newStatus)}, {internalField, enc(newInternal)}},
			&pb.Pod{Metadata: meta, Spec: spec, Status: newStatus, Internal: newInternal}},
		{"every occurrence replaced, unknown fields kept", scrambled,
			[]RawField{{statusField, enc(newStatus)}},
			&pb.Pod{Metadata: meta, Spec: spec, Status: newStatus}},
		{"an empty message stays present", whole,
			[]RawField{{internalField, []byte{}}},
			&pb.Pod{Metadata: meta, Spec: spec, Status: &pb.PodStatus{Phase: "Pending", Reason: "old"}, Internal: &pb.PodInternal{}}},
		{"a nil value drops the field", whole,
			[]RawField{{statusField, nil}, {internalField, nil}},
			&pb.Pod{Metadata: meta, Spec: spec}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, ok := ReplaceFields(tt.data, tt.fields...)
			if !ok {
				t.Fatal("ReplaceFields refused a well-formed message")
			}
			got := &pb.Pod{}
			if err := proto.Unmarshal(data, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform(), protocmp.IgnoreUnknown()); diff != "" {
				t.Errorf("replaced message (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("unknown fields survive", func(t *testing.T) {
		data, _ := ReplaceFields(scrambled, RawField{statusField, enc(newStatus)})
		got := &pb.Pod{}
		if err := proto.Unmarshal(data, got); err != nil {
			t.Fatal(err)
		}
		if u := got.ProtoReflect().GetUnknown(); string(u) != string(unknown) {
			t.Errorf("unknown fields %x, want %x", u, unknown)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		if _, ok := ReplaceFields(whole[:len(whole)-1], RawField{statusField, nil}); ok {
			t.Error("ReplaceFields took a truncated message")
		}
	})
}

// EachField walks the fields in wire order with their places, stops when told, and refuses a
// truncated message.
func TestEachField(t *testing.T) {
	var data []byte
	data = protowire.AppendTag(data, 1, protowire.BytesType)
	data = protowire.AppendString(data, "web")
	data = protowire.AppendTag(data, 5, protowire.VarintType)
	data = protowire.AppendVarint(data, 300)
	data = protowire.AppendTag(data, 1, protowire.BytesType)
	data = protowire.AppendString(data, "")
	type seen struct {
		num   protowire.Number
		pos   int
		value string
		bytes bool
	}
	var got []seen
	if !EachField(data, func(f WireField) bool {
		if string(data[f.Pos:f.Pos+len(f.Raw)]) != string(f.Raw) {
			t.Errorf("field %d: Raw is not data at Pos %d", f.Num, f.Pos)
		}
		got = append(got, seen{f.Num, f.Pos, string(f.Value), f.Type == protowire.BytesType})
		return true
	}) {
		t.Fatal("a well-formed message refused")
	}
	want := []seen{{1, 0, "web", true}, {5, 5, "", false}, {1, 8, "", true}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(seen{})); d != "" {
		t.Errorf("fields (-want +got):\n%s", d)
	}
	n := 0
	EachField(data, func(WireField) bool { n++; return false })
	if n != 1 {
		t.Errorf("%d calls after the first said stop", n)
	}
	if EachField(data[:len(data)-4], func(WireField) bool { return true }) {
		t.Error("a truncated message walked to its end")
	}
}

// EditFields keeps, drops and replaces fields in place, gives data itself back when nothing changed,
// and refuses what its editor refuses.
func TestEditFields(t *testing.T) {
	in := &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1", Finalizers: []string{"a", "b", "c"}}
	data, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	nameNum, finNum := FieldNumber(in, "name"), FieldNumber(in, "finalizers")
	for _, tt := range []struct {
		name    string
		edit    func(WireField) (FieldEdit, []byte)
		want    *pb.ObjectMeta // nil: refused
		changed bool
	}{
		{"keep all", func(WireField) (FieldEdit, []byte) { return KeepField, nil }, in, false},
		{"drop b", func(f WireField) (FieldEdit, []byte) {
			if f.Num == finNum && string(f.Value) == "b" {
				return DropField, nil
			}
			return KeepField, nil
		}, &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1", Finalizers: []string{"a", "c"}}, true},
		{"replace name and a", func(f WireField) (FieldEdit, []byte) {
			switch {
			case f.Num == nameNum:
				return ReplaceField, []byte("api")
			case f.Num == finNum && string(f.Value) == "a":
				return ReplaceField, []byte("z")
			}
			return KeepField, nil
		}, &pb.ObjectMeta{Name: "api", Namespace: "default", Uid: "u1", Finalizers: []string{"z", "b", "c"}}, true},
		{"refuse", func(f WireField) (FieldEdit, []byte) {
			if f.Num == finNum {
				return RefuseField, nil
			}
			return DropField, nil
		}, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, changed, ok := EditFields(data, tt.edit)
			if ok != (tt.want != nil) || changed != tt.changed {
				t.Fatalf("changed %v, ok %v; want %v, %v", changed, ok, tt.changed, tt.want != nil)
			}
			if !ok {
				return
			}
			if !changed && &out[0] != &data[0] {
				t.Error("nothing changed, but data was copied")
			}
			got := &pb.ObjectMeta{}
			if err := proto.Unmarshal(out, got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got, protocmp.Transform()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	if _, _, ok := EditFields(data[:len(data)-1], func(WireField) (FieldEdit, []byte) { return KeepField, nil }); ok {
		t.Error("a truncated message accepted")
	}
}

// Reading a message field by field with NextField gives what the decoder gives.
func TestNextFieldReadsWhatTheDecoderReads(t *testing.T) {
	md := &pb.ObjectMeta{Name: "web-0", Namespace: "default", Generation: 7,
		Labels: map[string]string{"app": "web", "tier": "", "": "empty key"}}
	data, err := proto.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var gen uint64
	labels := map[string]string{}
	for len(data) > 0 {
		f, rest, ok := NextField(data)
		if !ok {
			t.Fatal("malformed")
		}
		data = rest
		switch f.Num {
		case FieldNumber(md, "name"):
			b, ok := f.StringBytes()
			if !ok {
				t.Fatal("name is not a string")
			}
			name = string(b)
		case FieldNumber(md, "generation"):
			if gen, ok = f.Varint(); !ok {
				t.Fatal("generation is not a varint")
			}
		case FieldNumber(md, "labels"):
			k, v, ok := f.MapEntry()
			if !ok {
				t.Fatal("malformed label")
			}
			labels[string(k)] = string(v)
		}
	}
	if name != md.Name || gen != uint64(md.Generation) || !maps.Equal(labels, md.Labels) {
		t.Errorf("read %q %d %v, want %q %d %v", name, gen, labels, md.Name, md.Generation, md.Labels)
	}
}

// A Timestamp field reads as the decoder reads it: the epoch when empty, negative seconds too.
func TestWireFieldTimestamp(t *testing.T) {
	for _, ts := range []*timestamppb.Timestamp{{}, {Seconds: 1764590400, Nanos: 123456789}, {Seconds: -62135596800}} {
		data, err := proto.Marshal(&pb.PodCondition{Type: "Ready", LastTransitionTime: ts})
		if err != nil {
			t.Fatal(err)
		}
		for len(data) > 0 {
			f, rest, ok := NextField(data)
			if !ok {
				t.Fatal("malformed")
			}
			data = rest
			if f.Num != FieldNumber(&pb.PodCondition{}, "last_transition_time") {
				continue
			}
			sec, nsec, ok := f.Timestamp()
			if !ok || sec != ts.Seconds || nsec != ts.Nanos {
				t.Errorf("read %d.%09d (%t), want %d.%09d", sec, nsec, ok, ts.Seconds, ts.Nanos)
			}
		}
	}
	if _, _, ok := (WireField{Type: protowire.VarintType}).Timestamp(); ok {
		t.Error("a varint read as a Timestamp")
	}
}

// What the decoder refuses, or reads as an unknown field, the field readers report.
func TestWireFieldRefusals(t *testing.T) {
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	field := func(data []byte) WireField {
		f, _, ok := NextField(data)
		if !ok {
			t.Fatalf("malformed %x", data)
		}
		return f
	}
	str := protowire.AppendBytes(tag(1, protowire.BytesType), []byte("ok"))
	varint := protowire.AppendVarint(tag(2, protowire.VarintType), 1)
	for _, tc := range []struct {
		name string
		ok   func() bool
	}{
		{"a truncated tag", func() bool { _, _, ok := NextField([]byte{0x80}); return ok }},
		{"a length past the end", func() bool { _, _, ok := NextField(append(tag(1, protowire.BytesType), 5, 'a')); return ok }},
		{"a string that is not UTF-8", func() bool {
			_, ok := field(protowire.AppendBytes(tag(1, protowire.BytesType), []byte{0xff})).StringBytes()
			return ok
		}},
		{"a string given as a varint", func() bool { _, ok := field(varint).StringBytes(); return ok }},
		{"a varint given as bytes", func() bool { _, ok := field(str).Varint(); return ok }},
		{"a map entry given as a varint", func() bool { _, _, ok := field(varint).MapEntry(); return ok }},
		{"a map key that is not UTF-8", func() bool {
			entry := protowire.AppendBytes(tag(1, protowire.BytesType), []byte{0xc3})
			_, _, ok := field(protowire.AppendBytes(tag(6, protowire.BytesType), entry)).MapEntry()
			return ok
		}},
	} {
		if tc.ok() {
			t.Errorf("%s: read", tc.name)
		}
	}
	var seen uint64
	msg := field(str)
	if !msg.FirstOf(&seen) || msg.FirstOf(&seen) || field(varint).FirstOf(&seen) {
		t.Error("FirstOf: a message field is first once, and only when length-delimited")
	}
	if high := field(protowire.AppendBytes(tag(64, protowire.BytesType), nil)); high.FirstOf(&seen) {
		t.Error("FirstOf took field 64")
	}
}
