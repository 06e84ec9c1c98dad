package wire

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Reading a message field by field gives what the decoder gives.
func TestReadsWhatTheDecoderReads(t *testing.T) {
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
		num, typ, v, rest, ok := Next(data)
		if !ok {
			t.Fatal("malformed")
		}
		data = rest
		switch num {
		case Field(md, "name"):
			b, ok := String(typ, v)
			if !ok {
				t.Fatal("name is not a string")
			}
			name = string(b)
		case Field(md, "generation"):
			if gen, ok = Varint(typ, v); !ok {
				t.Fatal("generation is not a varint")
			}
		case Field(md, "labels"):
			k, v, ok := MapEntry(v)
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

// What the decoder refuses, or reads as an unknown field, the readers report.
func TestRefusals(t *testing.T) {
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	for _, tc := range []struct {
		name string
		ok   func() bool
	}{
		{"a truncated tag", func() bool { _, _, _, _, ok := Next([]byte{0x80}); return ok }},
		{"a length past the end", func() bool { _, _, _, _, ok := Next(append(tag(1, protowire.BytesType), 5, 'a')); return ok }},
		{"a string that is not UTF-8", func() bool { _, ok := String(protowire.BytesType, []byte{0xff}); return ok }},
		{"a string given as a varint", func() bool { _, ok := String(protowire.VarintType, []byte{1}); return ok }},
		{"a varint given as bytes", func() bool { _, ok := Varint(protowire.BytesType, []byte{1}); return ok }},
		{"a map key that is not UTF-8", func() bool {
			_, _, ok := MapEntry(protowire.AppendBytes(tag(1, protowire.BytesType), []byte{0xc3}))
			return ok
		}},
	} {
		if tc.ok() {
			t.Errorf("%s: read", tc.name)
		}
	}
	var seen uint64
	if !Once(&seen, 3) || Once(&seen, 3) || !Once(&seen, 63) || Once(&seen, 64) {
		t.Error("Once: a field is first once, and only below 64")
	}
	defer func() {
		if recover() == nil {
			t.Error("Field of a name the message lacks did not panic")
		}
	}()
	Field(&pb.ObjectMeta{}, "no_such_field")
}
