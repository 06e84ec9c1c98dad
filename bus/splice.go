package bus

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Splice encodes m and appends raw, the wire form of a message, as m's field num, which m must leave
// unset. A service that has a pod's bytes at hand (it just stored them, or received them) sends them
// on as they are instead of encoding the pod again: the pod is most of a pipeline message, so its
// encoding is most of the message's. Readers see an ordinary message (a field's place in the wire form
// does not matter).
func Splice(m proto.Message, num protowire.Number, raw []byte) ([]byte, error) {
	// Sized once: the marshal reuses the size the Size call cached in the message.
	n := proto.Size(m)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(make([]byte, 0, n+len(raw)+16), m)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", m, err)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, raw), nil
}

// WireField is one field of a message's wire form, as EachField walks it.
type WireField struct {
	Num  protowire.Number
	Type protowire.Type
	// Raw is the whole field, tag included; Value a length-delimited field's contents (nil for the
	// other wire types).
	Raw, Value []byte
	// Pos is where Raw starts in the message's wire form.
	Pos int
}

// EachField calls f with each field of data, the wire form of a message, in order, until f returns
// false. It reports false when data is malformed (up to where f stopped).
func EachField(data []byte, f func(WireField) bool) bool {
	for pos := 0; pos < len(data); {
		wf, _, ok := NextField(data[pos:])
		if !ok {
			return false
		}
		wf.Pos = pos
		if !f(wf) {
			return true
		}
		pos += len(wf.Raw)
	}
	return true
}

// NextField reads the first field of data, the wire form of a message (Pos 0), and returns what
// follows it; false when data is malformed. A reader that needs a few fields of every pod walks them
// with it, with no function value to allocate.
func NextField(data []byte) (f WireField, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 {
		return WireField{}, nil, false
	}
	l := protowire.ConsumeFieldValue(num, typ, data[n:])
	if l < 0 {
		return WireField{}, nil, false
	}
	f = WireField{Num: num, Type: typ, Raw: data[:n+l]}
	if typ == protowire.BytesType {
		f.Value, _ = protowire.ConsumeBytes(data[n:])
	}
	return f, data[n+l:], true
}

// StringBytes is f's value as a decoder reads a string field: false unless f is length-delimited and
// UTF-8, as the decoder requires.
func (f WireField) StringBytes() ([]byte, bool) {
	if f.Type != protowire.BytesType || !utf8.Valid(f.Value) {
		return nil, false
	}
	return f.Value, true
}

// Varint is f's value as a decoder reads a varint field (int32, int64, bool, ...): false unless f is
// one.
func (f WireField) Varint() (uint64, bool) {
	if f.Type != protowire.VarintType {
		return 0, false
	}
	_, _, n := protowire.ConsumeTag(f.Raw)
	v, l := protowire.ConsumeVarint(f.Raw[n:])
	return v, l > 0
}

// MapEntry is the key and value of an entry of a map<string, string> field, f (an absent one is
// empty): false unless f is a well-formed entry.
func (f WireField) MapEntry() (k, v []byte, ok bool) {
	if f.Type != protowire.BytesType {
		return nil, nil, false
	}
	for data := f.Value; len(data) > 0; {
		e, rest, ok := NextField(data)
		if !ok {
			return nil, nil, false
		}
		data = rest
		switch e.Num {
		case 1:
			k, ok = e.StringBytes()
		case 2:
			v, ok = e.StringBytes()
		}
		if !ok {
			return nil, nil, false
		}
	}
	return k, v, true
}

// Timestamp is f's value as a decoder reads a google.protobuf.Timestamp field: false unless f is a
// well-formed one.
func (f WireField) Timestamp() (sec int64, nsec int32, ok bool) {
	if f.Type != protowire.BytesType {
		return 0, 0, false
	}
	for data := f.Value; len(data) > 0; {
		e, rest, ok := NextField(data)
		if !ok {
			return 0, 0, false
		}
		data = rest
		var n uint64
		switch e.Num {
		case 1:
			n, ok = e.Varint()
			sec = int64(n)
		case 2:
			n, ok = e.Varint()
			nsec = int32(n)
		}
		if !ok {
			return 0, 0, false
		}
	}
	return sec, nsec, true
}

// FirstOf marks the message field f (numbered below 64) in *seen and says whether it was not marked
// yet and is length-delimited: a decoder merges a message field given twice, which a reader of the
// plain form leaves to it.
func (f WireField) FirstOf(seen *uint64) bool {
	bit := uint64(1) << (uint(f.Num) & 63)
	if f.Num >= 64 || f.Type != protowire.BytesType || *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// FieldEdit is what EditFields does with one field.
type FieldEdit int

const (
	KeepField    FieldEdit = iota
	DropField              // the field goes
	ReplaceField           // the contents returned with it take the place of the field's own
	RefuseField            // the field is malformed: EditFields reports false
)

// EditFields returns data, the wire form of a message, with each field as edit says; data itself when
// edit keeps them all, so a reader that rarely changes anything copies nothing. changed says whether
// any field changed; ok is false when data is malformed or edit refused a field.
func EditFields(data []byte, edit func(WireField) (FieldEdit, []byte)) (out []byte, changed, ok bool) {
	copied := 0 // data[:copied] is in out
	refused := false
	wellFormed := EachField(data, func(f WireField) bool {
		e, v := edit(f)
		switch e {
		case KeepField:
			return true
		case RefuseField:
			refused = true
			return false
		}
		if out == nil {
			out = make([]byte, 0, len(data))
		}
		out = append(out, data[copied:f.Pos]...)
		if e == ReplaceField {
			out = protowire.AppendTag(out, f.Num, protowire.BytesType)
			out = protowire.AppendBytes(out, v)
		}
		copied = f.Pos + len(f.Raw)
		return true
	})
	switch {
	case !wellFormed || refused:
		return nil, false, false
	case out == nil:
		return data, false, true
	}
	return append(out, data[copied:]...), true, true
}

// Field returns the contents of the length-delimited field num (a message's wire form, a string or
// bytes) of data, the wire form of a message. It reports false when the field is absent, appears more
// than once (a reader would merge a message's copies), or data is malformed.
func Field(data []byte, num protowire.Number) ([]byte, bool) {
	var found []byte
	n := 0
	ok := EachField(data, func(f WireField) bool {
		if f.Num == num && f.Type == protowire.BytesType {
			found, n = f.Value, n+1
		}
		return true
	})
	return found, ok && n == 1
}

// FieldNumber is the number of m's field called name; it panics if there is none (a programming
// error, found by the first test that runs the code).
func FieldNumber(m proto.Message, name string) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		panic(fmt.Sprintf("%s has no field %q", m.ProtoReflect().Descriptor().FullName(), name))
	}
	return fd.Number()
}

// RawField is a length-delimited field in wire form: Value is the field's contents (a message's wire
// form, a string or bytes). A nil Value stands for the field's absence.
type RawField struct {
	Num   protowire.Number
	Value []byte
}

// ReplaceFields returns data, the wire form of a message, with each of fields in place of every
// occurrence of its number in data: decoding the result gives what decoding data and then setting those
// fields would, and leaves every other field, unknown ones included, as stored. A writer that changes
// one part of a large message (the status of a pod) encodes that part alone. It reports false when data
// is malformed.
func ReplaceFields(data []byte, fields ...RawField) ([]byte, bool) {
	size := len(data)
	for _, f := range fields {
		size += protowire.SizeTag(f.Num) + protowire.SizeBytes(len(f.Value))
	}
	out := make([]byte, 0, size)
	ok := EachField(data, func(wf WireField) bool {
		if !slices.ContainsFunc(fields, func(f RawField) bool { return f.Num == wf.Num }) {
			out = append(out, wf.Raw...)
		}
		return true
	})
	if !ok {
		return nil, false
	}
	for _, f := range fields {
		if f.Value != nil {
			out = protowire.AppendTag(out, f.Num, protowire.BytesType)
			out = protowire.AppendBytes(out, f.Value)
		}
	}
	return out, true
}
