package audit

import (
	"errors"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// errSlowPath marks a message the fast encoder leaves to protojson.
var errSlowPath = errors.New("left to protojson")

// appendProtoJSON appends m as protojson would (single line, JSON names, no unpopulated fields),
// without protojson's per-message sorting and allocations, which are most of a replay's cost. It
// covers the kinds podbus's messages use and leaves anything else (floats, bytes, other well-known
// types, invalid UTF-8, out-of-range times) to protojson, so its errors stay protojson's. Unlike
// protojson it never inserts the random space after a separator.
func appendProtoJSON(b []byte, m proto.Message) ([]byte, error) {
	start := len(b)
	out, err := appendMessageJSON(b, m.ProtoReflect())
	if err == nil {
		return out, nil
	}
	return jsonOpts.MarshalAppend(out[:start], m)
}

func appendMessageJSON(b []byte, m protoreflect.Message) ([]byte, error) {
	desc := m.Descriptor()
	if name := string(desc.FullName()); strings.HasPrefix(name, "google.protobuf.") {
		if name == "google.protobuf.Timestamp" {
			return appendTimestampJSON(b, m)
		}
		return b, errSlowPath
	}
	if desc.ExtensionRanges().Len() > 0 {
		return b, errSlowPath
	}
	b = append(b, '{')
	first := true
	fields := desc.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, fd.JSONName()...)
		b = append(b, '"', ':')
		var err error
		switch v := m.Get(fd); {
		case fd.IsList():
			b, err = appendListJSON(b, v.List(), fd)
		case fd.IsMap():
			b, err = appendMapJSON(b, v.Map(), fd)
		default:
			b, err = appendSingularJSON(b, v, fd)
		}
		if err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

func appendListJSON(b []byte, l protoreflect.List, fd protoreflect.FieldDescriptor) ([]byte, error) {
	b = append(b, '[')
	for i := 0; i < l.Len(); i++ {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendSingularJSON(b, l.Get(i), fd); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

// appendMapJSON writes entries in protojson's key order (order.GenericKeyOrder), taking each value
// with its key: a map lookup through protoreflect allocates.
func appendMapJSON(b []byte, mp protoreflect.Map, fd protoreflect.FieldDescriptor) ([]byte, error) {
	type entry struct {
		k protoreflect.MapKey
		v protoreflect.Value
	}
	entries := make([]entry, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		entries = append(entries, entry{k, v})
		return true
	})
	var cmp func(x, y protoreflect.MapKey) int
	switch fd.MapKey().Kind() {
	case protoreflect.BoolKind:
		cmp = func(x, y protoreflect.MapKey) int {
			switch {
			case x.Bool() == y.Bool():
				return 0
			case !x.Bool():
				return -1
			}
			return 1
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		cmp = func(x, y protoreflect.MapKey) int { return cmpOrdered(x.Int(), y.Int()) }
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		cmp = func(x, y protoreflect.MapKey) int { return cmpOrdered(x.Uint(), y.Uint()) }
	default:
		cmp = func(x, y protoreflect.MapKey) int { return strings.Compare(x.String(), y.String()) }
	}
	slices.SortFunc(entries, func(x, y entry) int { return cmp(x.k, y.k) })
	vd := fd.MapValue()
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendProtoString(b, e.k.String()); err != nil {
			return b, err
		}
		b = append(b, ':')
		if b, err = appendSingularJSON(b, e.v, vd); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

func cmpOrdered[T int64 | uint64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func appendSingularJSON(b []byte, v protoreflect.Value, fd protoreflect.FieldDescriptor) ([]byte, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool()), nil
	case protoreflect.StringKind:
		return appendProtoString(b, v.String())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.AppendInt(b, v.Int(), 10), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(b, v.Uint(), 10), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendInt(b, v.Int(), 10), '"'), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendUint(b, v.Uint(), 10), '"'), nil
	case protoreflect.EnumKind:
		ed := fd.Enum()
		if ed.FullName() == "google.protobuf.NullValue" {
			return b, errSlowPath
		}
		if ev := ed.Values().ByNumber(v.Enum()); ev != nil {
			b = append(b, '"')
			return append(append(b, ev.Name()...), '"'), nil
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10), nil
	case protoreflect.MessageKind:
		return appendMessageJSON(b, v.Message())
	}
	return b, errSlowPath
}

// The range protojson accepts for a Timestamp: years 1 to 9999.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// appendTimestampJSON writes RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits, as protojson does.
func appendTimestampJSON(b []byte, m protoreflect.Message) ([]byte, error) {
	ts, ok := m.Interface().(*timestamppb.Timestamp)
	if !ok {
		return b, errSlowPath
	}
	secs, nanos := ts.GetSeconds(), ts.GetNanos()
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos > 999_999_999 {
		return b, errSlowPath
	}
	b = append(b, '"')
	b = time.Unix(secs, 0).UTC().AppendFormat(b, "2006-01-02T15:04:05")
	switch {
	case nanos == 0:
	case nanos%1_000_000 == 0:
		b = appendFraction(b, int64(nanos/1_000_000), 3)
	case nanos%1_000 == 0:
		b = appendFraction(b, int64(nanos/1_000), 6)
	default:
		b = appendFraction(b, int64(nanos), 9)
	}
	return append(b, 'Z', '"'), nil
}

func appendFraction(b []byte, n int64, digits int) []byte {
	b = append(b, '.')
	s := strconv.AppendInt(make([]byte, 0, 9), n, 10)
	for i := len(s); i < digits; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// appendProtoString escapes as protojson does: quote, backslash and control characters only; invalid
// UTF-8 is left to protojson (which refuses it).
func appendProtoString(b []byte, s string) ([]byte, error) {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			b = append(b, c)
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return b, errSlowPath
			}
			b = append(b, s[i:i+size]...)
			i += size
			continue
		}
		b = append(b, '\\')
		switch c {
		case '"', '\\':
			b = append(b, c)
		case '\b':
			b = append(b, 'b')
		case '\f':
			b = append(b, 'f')
		case '\n':
			b = append(b, 'n')
		case '\r':
			b = append(b, 'r')
		case '\t':
			b = append(b, 't')
		default:
			b = append(b, 'u')
			b = append(b, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			b = strconv.AppendUint(b, uint64(c), 16)
		}
		i++
	}
	return append(b, '"'), nil
}
