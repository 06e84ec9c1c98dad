package bus

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Mask names the fields of a message kept by Prune: a field maps to the mask of its own fields when
// it is a message pruned in turn, or to nil when it is kept whole.
type Mask map[protowire.Number]Mask

// NewMask is the mask of m's fields named by paths, dotted field names ("status.conditions.type"); a
// path that stops at a message keeps it whole. It panics on a name m does not have (a programming
// error, found by the first test that runs the code).
func NewMask(m proto.Message, paths ...string) Mask {
	root := Mask{}
	for _, p := range paths {
		md, mask := m.ProtoReflect().Descriptor(), root
		names := strings.Split(p, ".")
		for i, name := range names {
			fd := md.Fields().ByName(protoreflect.Name(name))
			if fd == nil {
				panic(fmt.Sprintf("%s has no field %q (in %q)", md.FullName(), name, p))
			}
			last := i == len(names)-1
			if last {
				mask[fd.Number()] = nil // kept whole, even if a shorter path pruned it before
				break
			}
			if fd.Message() == nil || fd.IsMap() {
				panic(fmt.Sprintf("%s.%s is not a message to prune (in %q)", md.FullName(), name, p))
			}
			sub, seen := mask[fd.Number()]
			if seen && sub == nil {
				break // already kept whole
			}
			if sub == nil {
				sub = Mask{}
				mask[fd.Number()] = sub
			}
			md, mask = fd.Message(), sub
		}
	}
	return root
}

// Prune returns the wire form of a message holding only the fields of data (a message's wire form)
// that mask names, each occurrence in its place, so that decoding the result gives what decoding data
// would give for those fields (repeated and merged occurrences included). A reader that needs a few
// fields of a large message decodes those instead of the whole: the pods bucket's watchers look at a
// pod's phase or node on every change. A masked field of the wrong wire type is dropped (a decoder
// would keep it as an unknown field). It reports false when data is malformed.
func Prune(data []byte, mask Mask) ([]byte, bool) {
	n, ok := mask.size(data)
	if !ok {
		return nil, false
	}
	return mask.appendTo(make([]byte, 0, n), data), true
}

// size is the length of data pruned to the mask.
func (mask Mask) size(data []byte) (int, bool) {
	total := 0
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, false
		}
		l := protowire.ConsumeFieldValue(num, typ, data[n:])
		if l < 0 {
			return 0, false
		}
		if sub, ok := mask[num]; ok {
			switch {
			case sub == nil:
				total += n + l
			case typ == protowire.BytesType:
				v, _ := protowire.ConsumeBytes(data[n:])
				inner, ok := sub.size(v)
				if !ok {
					return 0, false
				}
				total += n + protowire.SizeVarint(uint64(inner)) + inner
			}
		}
		data = data[n+l:]
	}
	return total, true
}

// appendTo appends data pruned to the mask; data is well-formed (size said so).
func (mask Mask) appendTo(dst, data []byte) []byte {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		l := protowire.ConsumeFieldValue(num, typ, data[n:])
		if sub, ok := mask[num]; ok {
			switch {
			case sub == nil:
				dst = append(dst, data[:n+l]...)
			case typ == protowire.BytesType:
				v, _ := protowire.ConsumeBytes(data[n:])
				inner, _ := sub.size(v)
				dst = protowire.AppendTag(dst, num, protowire.BytesType)
				dst = protowire.AppendVarint(dst, uint64(inner))
				dst = sub.appendTo(dst, v)
			}
		}
		data = data[n+l:]
	}
	return dst
}
