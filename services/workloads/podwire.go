package workloads

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/podbus/podbus/bus"
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
		f, rest, ok := bus.NextField(data)
		if !ok {
			return nil, false
		}
		data = rest
		switch f.Num {
		case fPodMeta, fPodSpec, fPodStatus, fPodInternal:
		default:
			continue
		}
		if !f.FirstOf(&r.seen) {
			return nil, false
		}
		switch f.Num {
		case fPodMeta:
			ok = r.meta(c, f.Value)
		case fPodSpec:
			c.has |= hasSpec
			var node []byte
			node, ok = lastString(f.Value, fSpecNode)
			c.node = intern.Bytes(node)
		case fPodStatus:
			ok = r.status(c, f.Value)
		case fPodInternal:
			c.has |= hasInternal
			r.correlation, ok = lastString(f.Value, fInternalCorrelation)
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
		f, rest, ok := bus.NextField(data)
		if !ok {
			return false
		}
		data = rest
		switch f.Num {
		case fMetaName:
			r.name, ok = f.StringBytes()
		case fMetaNamespace:
			c.namespace, ok = interned(f)
		case fMetaUID:
			r.uid, ok = f.StringBytes()
		case fMetaLabels:
			var k, v []byte
			if k, v, ok = f.MapEntry(); ok {
				if c.labels == nil {
					c.labels = make(map[string]string, 4)
				}
				c.labels[string(k)] = string(v)
			}
		case fMetaCreated:
			c.has |= hasCreated
			c.created.sec, c.created.nsec, ok = f.Timestamp()
			ok = ok && f.FirstOf(&seen)
		case fMetaDeleted:
			c.has |= hasDeleted
			c.deleted.sec, c.deleted.nsec, ok = f.Timestamp()
			ok = ok && f.FirstOf(&seen)
		case fMetaOwners:
			var o cachedOwner
			if ok = f.Type == protowire.BytesType && owner(f.Value, &o); ok {
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

func owner(data []byte, o *cachedOwner) bool {
	for len(data) > 0 {
		f, rest, ok := bus.NextField(data)
		if !ok {
			return false
		}
		data = rest
		switch f.Num {
		case fOwnerAPIVersion:
			o.apiVersion, ok = interned(f)
		case fOwnerKind:
			o.kind, ok = interned(f)
		case fOwnerName:
			o.name, ok = interned(f)
		case fOwnerUID:
			o.uid, ok = interned(f)
		case fOwnerController:
			o.controller, ok = wireBool(f)
		case fOwnerBlock:
			o.blockOwnerDeletion, ok = wireBool(f)
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
		f, rest, ok := bus.NextField(data)
		if !ok {
			return false
		}
		data = rest
		switch f.Num {
		case fStatusPhase:
			c.phase, ok = interned(f)
		case fStatusConditions:
			ok = f.Type == protowire.BytesType && readyCondition(c, f.Value)
		case fStatusContainers:
			var n uint64
			if ok = f.Type == protowire.BytesType; ok {
				n, ok = lastVarint(f.Value, fContainerRestarts)
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
	var seen uint64
	for len(data) > 0 {
		f, rest, ok := bus.NextField(data)
		if !ok {
			return false
		}
		data = rest
		switch f.Num {
		case fConditionType:
			typ, ok = f.StringBytes()
		case fConditionStatus:
			status, ok = f.StringBytes()
		case fConditionAt:
			at.sec, at.nsec, ok = f.Timestamp()
			ok = ok && f.FirstOf(&seen)
		}
		if !ok {
			return false
		}
	}
	if string(typ) == "Ready" && c.has&hasReady == 0 {
		c.has |= hasReady
		c.readyStatus = intern.Bytes(status)
		if seen != 0 {
			c.has |= hasReadyAt
			c.readyAt = at
		}
	}
	return true
}

// lastString is the string field num of a message's wire form, its last occurrence as a decoder
// reads it.
func lastString(data []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	for len(data) > 0 {
		f, rest, ok := bus.NextField(data)
		if !ok {
			return nil, false
		}
		data = rest
		if f.Num == num {
			if out, ok = f.StringBytes(); !ok {
				return nil, false
			}
		}
	}
	return out, true
}

// lastVarint is lastString for a varint field.
func lastVarint(data []byte, num protowire.Number) (uint64, bool) {
	var out uint64
	for len(data) > 0 {
		f, rest, ok := bus.NextField(data)
		if !ok {
			return 0, false
		}
		data = rest
		if f.Num == num {
			if out, ok = f.Varint(); !ok {
				return 0, false
			}
		}
	}
	return out, true
}

// interned is a string field's value, interned from its bytes.
func interned(f bus.WireField) (string, bool) {
	b, ok := f.StringBytes()
	return intern.Bytes(b), ok
}

func wireBool(f bus.WireField) (optBool, bool) {
	n, ok := f.Varint()
	if n != 0 {
		return boolTrue, ok
	}
	return boolFalse, ok
}

// The numbers of the fields wireCached reads, from the messages' descriptors.
var (
	fPodMeta, fPodSpec   = bus.FieldNumber(&pb.Pod{}, "metadata"), bus.FieldNumber(&pb.Pod{}, "spec")
	fPodStatus           = bus.FieldNumber(&pb.Pod{}, "status")
	fPodInternal         = bus.FieldNumber(&pb.Pod{}, "internal")
	fSpecNode            = bus.FieldNumber(&pb.PodSpec{}, "node_name")
	fInternalCorrelation = bus.FieldNumber(&pb.PodInternal{}, "correlation_id")

	fMetaName, fMetaNamespace = bus.FieldNumber(&pb.ObjectMeta{}, "name"), bus.FieldNumber(&pb.ObjectMeta{}, "namespace")
	fMetaUID, fMetaLabels     = bus.FieldNumber(&pb.ObjectMeta{}, "uid"), bus.FieldNumber(&pb.ObjectMeta{}, "labels")
	fMetaOwners               = bus.FieldNumber(&pb.ObjectMeta{}, "owner_references")
	fMetaCreated              = bus.FieldNumber(&pb.ObjectMeta{}, "creation_timestamp")
	fMetaDeleted              = bus.FieldNumber(&pb.ObjectMeta{}, "deletion_timestamp")

	fOwnerAPIVersion = bus.FieldNumber(&pb.OwnerReference{}, "api_version")
	fOwnerKind       = bus.FieldNumber(&pb.OwnerReference{}, "kind")
	fOwnerName       = bus.FieldNumber(&pb.OwnerReference{}, "name")
	fOwnerUID        = bus.FieldNumber(&pb.OwnerReference{}, "uid")
	fOwnerController = bus.FieldNumber(&pb.OwnerReference{}, "controller")
	fOwnerBlock      = bus.FieldNumber(&pb.OwnerReference{}, "block_owner_deletion")

	fStatusPhase       = bus.FieldNumber(&pb.PodStatus{}, "phase")
	fStatusConditions  = bus.FieldNumber(&pb.PodStatus{}, "conditions")
	fStatusContainers  = bus.FieldNumber(&pb.PodStatus{}, "container_statuses")
	fConditionType     = bus.FieldNumber(&pb.PodCondition{}, "type")
	fConditionStatus   = bus.FieldNumber(&pb.PodCondition{}, "status")
	fConditionAt       = bus.FieldNumber(&pb.PodCondition{}, "last_transition_time")
	fContainerRestarts = bus.FieldNumber(&pb.ContainerStatus{}, "restart_count")
)
