package nodelifecycle

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podfields"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// podHead is what a cachedPod keeps of a stored pod but its tolerations: cachedPodMask's fields.
type podHead struct {
	uid, name, ns, node, corr []byte
	deleting                  bool
}

// readPodHead reads data's head from its wire form, or, for any form but the plain one an encoder
// writes, through the decoder.
func readPodHead(data []byte) (podHead, bool) {
	if h, ok := wirePodHead(data); ok {
		return h, true
	}
	return decodePodHead(data)
}

// decodePodHead prunes data to cachedPodMask and decodes that.
func decodePodHead(data []byte) (podHead, bool) {
	p := &pb.Pod{}
	pruned, ok := bus.Prune(data, cachedPodMask)
	if !ok || proto.Unmarshal(pruned, p) != nil {
		return podHead{}, false
	}
	md := p.GetMetadata()
	return podHead{uid: []byte(md.GetUid()), name: []byte(md.GetName()), ns: []byte(md.GetNamespace()),
		node: []byte(p.GetSpec().GetNodeName()), corr: []byte(p.GetInternal().GetCorrelationId()),
		deleting: md.GetDeletionTimestamp() != nil}, true
}

// wirePodHead reads the head with bus.NextField, without allocating: the watch reads every change of
// every pod. It says no for a message field given twice (a decoder merges the two), a field of
// cachedPodMask of the wrong wire type, a string that is not UTF-8 and malformed data, leaving those
// to the decoder; a string given twice is the last, as decoded.
func wirePodHead(data []byte) (h podHead, ok bool) {
	var seen uint64
	for len(data) > 0 {
		var f bus.WireField
		if f, data, ok = bus.NextField(data); !ok {
			return h, false
		}
		switch f.Num {
		case podfields.PodMeta:
			ok = f.FirstOf(&seen) && h.meta(f.Value)
		case podfields.PodSpec:
			ok = f.FirstOf(&seen) && eachString(f.Value, podfields.SpecNode, &h.node)
		case podfields.PodInternal:
			ok = f.FirstOf(&seen) && eachString(f.Value, podfields.InternalCorrelation, &h.corr)
		}
		if !ok {
			return h, false
		}
	}
	return h, true
}

func (h *podHead) meta(data []byte) bool {
	for len(data) > 0 {
		f, rest, ok := bus.NextField(data)
		if !ok {
			return false
		}
		data = rest
		switch f.Num {
		case podfields.MetaUID:
			h.uid, ok = f.StringBytes()
		case podfields.MetaName:
			h.name, ok = f.StringBytes()
		case podfields.MetaNamespace:
			h.ns, ok = f.StringBytes()
		case podfields.MetaDeleted:
			// Present is all that counts, but the decoder would refuse a malformed timestamp, and
			// merges two: both go to it.
			_, _, ok = f.Timestamp()
			ok = ok && !h.deleting
			h.deleting = true
		}
		if !ok {
			return false
		}
	}
	return true
}

// eachString reads the string field num of a message's wire form into *dst (the last one given), and
// checks the message's other fields are well formed.
func eachString(data []byte, num protowire.Number, dst *[]byte) bool {
	for len(data) > 0 {
		f, rest, ok := bus.NextField(data)
		if !ok {
			return false
		}
		data = rest
		if f.Num == num {
			if *dst, ok = f.StringBytes(); !ok {
				return false
			}
		}
	}
	return true
}
