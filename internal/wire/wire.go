// Package wire reads fields straight from a protobuf message's wire form. A watcher that needs a few
// fields of every pod of the cluster, on every change, reads them here instead of decoding the pod
// into messages, maps and boxed values it drops at once. Readers built on it read the plain form an
// encoder writes and leave any other (a repeated message field, which a decoder merges) to the
// decoder; each keeps a test that holds it to the decoder's result.
package wire

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Next reads the first field of data: its number, wire type and value (a length-delimited one
// without its length), and what follows it. False when data is malformed.
func Next(data []byte) (num protowire.Number, typ protowire.Type, v, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 {
		return 0, 0, nil, nil, false
	}
	l := protowire.ConsumeFieldValue(num, typ, data[n:])
	if l < 0 {
		return 0, 0, nil, nil, false
	}
	v = data[n : n+l]
	if typ == protowire.BytesType {
		v, _ = protowire.ConsumeBytes(v)
	}
	return num, typ, v, data[n+l:], true
}

// String is a string field's value: false unless it is length-delimited and UTF-8, as the decoder
// requires of a string.
func String(typ protowire.Type, v []byte) ([]byte, bool) {
	if typ != protowire.BytesType || !utf8.Valid(v) {
		return nil, false
	}
	return v, true
}

// Varint is a varint field's value: false unless it is one.
func Varint(typ protowire.Type, v []byte) (uint64, bool) {
	if typ != protowire.VarintType {
		return 0, false
	}
	n, l := protowire.ConsumeVarint(v)
	return n, l > 0
}

// MapEntry is the key and value of an entry of a map<string, string> field (an absent one is empty).
func MapEntry(data []byte) (k, v []byte, ok bool) {
	for len(data) > 0 {
		num, typ, b, rest, ok := Next(data)
		if !ok {
			return nil, nil, false
		}
		data = rest
		switch num {
		case 1:
			k, ok = String(typ, b)
		case 2:
			v, ok = String(typ, b)
		}
		if !ok {
			return nil, nil, false
		}
	}
	return k, v, true
}

// Once marks field num (below 64) in *seen and says whether it was not marked yet: a message field
// given twice is merged by a decoder, which a reader leaves to it.
func Once(seen *uint64, num protowire.Number) bool {
	bit := uint64(1) << (uint(num) & 63)
	if num >= 64 || *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// Field is the number of m's field name. It panics when m has none: a programming error, found by the
// first test of the package that asks.
func Field(m proto.Message, name string) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		panic(string(m.ProtoReflect().Descriptor().FullName()) + " has no field " + name)
	}
	return fd.Number()
}
