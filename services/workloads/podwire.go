package workloads

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/internal/intern"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// wireCached reads a cachedPod straight from a pod's wire form, without the messages, maps and
// boxed values that decoding it first allocates: every pod of the cluster passes here on each of its
// changes. It reads podMask's fields as decodeProto does, and reports false, leaving the pod to
// decodeProto, for anything but the plain form an encoder writes: malformed data, a string that is
// not UTF-8, a field of the wrong wire type, or a message field given twice (which a decoder merges).
// TestCachedPodRoundTrip and FuzzWireCached hold the two to the same result.
func wireCached(data []byte) (*cachedPod, bool) {
	c := &cachedPod{}
	var r podRead
	for len(data) > 0 {
		num, typ, v, rest, ok := nextField(data)
		if !ok {
			return nil, false
		}
		data = rest
		switch num {
		case fPodMeta, fPodSpec, fPodStatus, fPodInternal:
		default:
			continue
		}
		if typ != protowire.BytesType || !once(&r.seen, 1<<uint(num)) {
			return nil, false
		}
		switch num {
		case fPodMeta:
			ok = r.meta(c, v)
		case fPodSpec:
			c.has |= hasSpec
			c.node, ok = stringField(v, fSpecNode)
		case fPodStatus:
			ok = r.status(c, v)
		case fPodInternal:
			c.has |= hasInternal
			r.correlation, ok = bytesField(v, fInternalCorrelation)
		}
		if !ok {
			return nil, false
		}
	}
	c.labels = intern.Labels(c.labels)
	c.ids = string(r.name) + string(r.uid) + string(r.correlation)
	c.nameLen, c.uidLen = uint32(len(r.name)), uint32(len(r.uid))
	return c, true
}

// podRead is what wireCached holds while it reads: the strings that end up in one, and which message
// fields it has seen.
type podRead struct {
	name, uid, correlation []byte
	seen                   uint64
}

func (r *podRead) meta(c *cachedPod, data []byte) bool {
	c.has |= hasMeta
	var seen uint64
	for len(data) > 0 {
		num, typ, v, rest, ok := nextField(data)
		if !ok {
			return false
		}
		data = rest
		switch num {
		case fMetaName:
			r.name, ok = wireBytes(typ, v)
		case fMetaNamespace:
			c.namespace, ok = wireInterned(typ, v)
		case fMetaUID:
			r.uid, ok = wireBytes(typ, v)
		case fMetaLabels:
			ok = typ == protowire.BytesType && label(c, v)
		case fMetaCreated:
			c.has |= hasCreated
			ok = typ == protowire.BytesType && once(&seen, 1) && wireStamp(v, &c.created)
		case fMetaDeleted:
			c.has |= hasDeleted
			ok = typ == protowire.BytesType && once(&seen, 2) && wireStamp(v, &c.deleted)
		case fMetaOwners:
			var o cachedOwner
			if ok = typ == protowire.BytesType && owner(v, &o); ok {
				if c.has&hasOwner == 0 {
					c.has |= hasOwner
					c.owner = o
				} else {
					c.moreOwners = append(c.moreOwners, o)
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// label adds one entry of the labels map; a later entry of a key replaces an earlier one.
func label(c *cachedPod, data []byte) bool {
	var k, v []byte
	for len(data) > 0 {
		num, typ, b, rest, ok := nextField(data)
		if !ok {
			return false
		}
		data = rest
		switch num {
		case 1:
			k, ok = wireBytes(typ, b)
		case 2:
			v, ok = wireBytes(typ, b)
		}
		if !ok {
			return false
		}
	}
	if c.labels == nil {
		c.labels = make(map[string]string, 4)
	}
	c.labels[string(k)] = string(v)
	return true
}

func owner(data []byte, o *cachedOwner) bool {
	for len(data) > 0 {
		num, typ, v, rest, ok := nextField(data)
		if !ok {
			return false
		}
		data = rest
		switch num {
		case fOwnerAPIVersion:
			o.apiVersion, ok = wireInterned(typ, v)
		case fOwnerKind:
			o.kind, ok = wireInterned(typ, v)
		case fOwnerName:
			o.name, ok = wireInterned(typ, v)
		case fOwnerUID:
			o.uid, ok = wireInterned(typ, v)
		case fOwnerController:
			o.controller, ok = wireBool(typ, v)
		case fOwnerBlock:
			o.blockOwnerDeletion, ok = wireBool(typ, v)
		}
		if !ok {
			return false
		}
	}
	return true
}

func (r *podRead) status(c *cachedPod, data []byte) bool {
	c.has |= hasStatus
	for len(data) > 0 {
		num, typ, v, rest, ok := nextField(data)
		if !ok {
			return false
		}
		data = rest
		switch num {
		case fStatusPhase:
			c.phase, ok = wireInterned(typ, v)
		case fStatusConditions:
			ok = typ == protowire.BytesType && readyCondition(c, v)
		case fStatusContainers:
			var n uint64
			if ok = typ == protowire.BytesType; ok {
				n, ok = varintField(v, fContainerRestarts)
				c.restarts = append(c.restarts, int32(n))
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// readyCondition keeps the first Ready condition, the one podutil.PodCondition finds.
func readyCondition(c *cachedPod, data []byte) bool {
	var typ, status []byte
	var at stamp
	var hasAt bool
	for len(data) > 0 {
		num, wt, v, rest, ok := nextField(data)
		if !ok {
			return false
		}
		data = rest
		switch num {
		case fConditionType:
			typ, ok = wireBytes(wt, v)
		case fConditionStatus:
			status, ok = wireBytes(wt, v)
		case fConditionAt:
			ok = wt == protowire.BytesType && !hasAt && wireStamp(v, &at)
			hasAt = true
		}
		if !ok {
			return false
		}
	}
	if string(typ) == "Ready" && c.has&hasReady == 0 {
		c.has |= hasReady
		c.readyStatus = intern.Bytes(status)
		if hasAt {
			c.has |= hasReadyAt
			c.readyAt = at
		}
	}
	return true
}

func wireStamp(data []byte, s *stamp) bool {
	for len(data) > 0 {
		num, typ, v, rest, ok := nextField(data)
		if !ok {
			return false
		}
		data = rest
		var n uint64
		switch num {
		case fStampSeconds:
			n, ok = wireVarint(typ, v)
			s.sec = int64(n)
		case fStampNanos:
			n, ok = wireVarint(typ, v)
			s.nsec = int32(n)
		}
		if !ok {
			return false
		}
	}
	return true
}

// nextField reads the first field of data: its number, wire type and value (a length-delimited one
// without its length), and what follows it. False when data is malformed.
func nextField(data []byte) (num protowire.Number, typ protowire.Type, v, rest []byte, ok bool) {
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

// bytesField is the last value of the string field num of a message's wire form.
func bytesField(data []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	for len(data) > 0 {
		n, typ, v, rest, ok := nextField(data)
		if !ok {
			return nil, false
		}
		data = rest
		if n == num {
			if out, ok = wireBytes(typ, v); !ok {
				return nil, false
			}
		}
	}
	return out, true
}

// stringField is bytesField, interned.
func stringField(data []byte, num protowire.Number) (string, bool) {
	b, ok := bytesField(data, num)
	return intern.Bytes(b), ok
}

// varintField is the last value of the varint field num of a message's wire form.
func varintField(data []byte, num protowire.Number) (uint64, bool) {
	var out uint64
	for len(data) > 0 {
		n, typ, v, rest, ok := nextField(data)
		if !ok {
			return 0, false
		}
		data = rest
		if n == num {
			if out, ok = wireVarint(typ, v); !ok {
				return 0, false
			}
		}
	}
	return out, true
}

// once marks bit in *seen and says whether it was clear: a message field given twice is merged by a
// decoder, which wireCached leaves to it.
func once(seen *uint64, bit uint64) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// wireBytes is a string field's value, false unless it is one: length-delimited and UTF-8, as the
// decoder requires.
func wireBytes(typ protowire.Type, v []byte) ([]byte, bool) {
	if typ != protowire.BytesType || !utf8.Valid(v) {
		return nil, false
	}
	return v, true
}

// wireInterned is a string field's value, interned.
func wireInterned(typ protowire.Type, v []byte) (string, bool) {
	b, ok := wireBytes(typ, v)
	return intern.Bytes(b), ok
}

func wireVarint(typ protowire.Type, v []byte) (uint64, bool) {
	if typ != protowire.VarintType {
		return 0, false
	}
	n, l := protowire.ConsumeVarint(v)
	return n, l > 0
}

func wireBool(typ protowire.Type, v []byte) (optBool, bool) {
	n, ok := wireVarint(typ, v)
	if n != 0 {
		return boolTrue, ok
	}
	return boolFalse, ok
}

// The numbers of the fields wireCached reads, from the messages' descriptors.
var (
	fPodMeta, fPodSpec   = field(&pb.Pod{}, "metadata"), field(&pb.Pod{}, "spec")
	fPodStatus           = field(&pb.Pod{}, "status")
	fPodInternal         = field(&pb.Pod{}, "internal")
	fSpecNode            = field(&pb.PodSpec{}, "node_name")
	fInternalCorrelation = field(&pb.PodInternal{}, "correlation_id")

	fMetaName, fMetaNamespace = field(&pb.ObjectMeta{}, "name"), field(&pb.ObjectMeta{}, "namespace")
	fMetaUID, fMetaLabels     = field(&pb.ObjectMeta{}, "uid"), field(&pb.ObjectMeta{}, "labels")
	fMetaOwners               = field(&pb.ObjectMeta{}, "owner_references")
	fMetaCreated              = field(&pb.ObjectMeta{}, "creation_timestamp")
	fMetaDeleted              = field(&pb.ObjectMeta{}, "deletion_timestamp")

	fOwnerAPIVersion, fOwnerKind = field(&pb.OwnerReference{}, "api_version"), field(&pb.OwnerReference{}, "kind")
	fOwnerName, fOwnerUID        = field(&pb.OwnerReference{}, "name"), field(&pb.OwnerReference{}, "uid")
	fOwnerController             = field(&pb.OwnerReference{}, "controller")
	fOwnerBlock                  = field(&pb.OwnerReference{}, "block_owner_deletion")

	fStatusPhase, fStatusConditions = field(&pb.PodStatus{}, "phase"), field(&pb.PodStatus{}, "conditions")
	fStatusContainers               = field(&pb.PodStatus{}, "container_statuses")
	fConditionType                  = field(&pb.PodCondition{}, "type")
	fConditionStatus                = field(&pb.PodCondition{}, "status")
	fConditionAt                    = field(&pb.PodCondition{}, "last_transition_time")
	fContainerRestarts              = field(&pb.ContainerStatus{}, "restart_count")

	fStampSeconds, fStampNanos = field(&timestamppb.Timestamp{}, "seconds"), field(&timestamppb.Timestamp{}, "nanos")
)

// field is the number of m's field name; it panics when m has none (a programming error, found by the
// package's first test).
func field(m proto.Message, name string) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		panic("no field " + name)
	}
	return fd.Number()
}
