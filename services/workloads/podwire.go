package workloads

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/wire"
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
		num, typ, v, rest, ok := wire.Next(data)
		if !ok {
			return nil, false
		}
		data = rest
		switch num {
		case fPodMeta, fPodSpec, fPodStatus, fPodInternal:
		default:
			continue
		}
		if typ != protowire.BytesType || !wire.Once(&r.seen, num) {
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
		num, typ, v, rest, ok := wire.Next(data)
		if !ok {
			return false
		}
		data = rest
		switch num {
		case fMetaName:
			r.name, ok = wire.String(typ, v)
		case fMetaNamespace:
			c.namespace, ok = wireInterned(typ, v)
		case fMetaUID:
			r.uid, ok = wire.String(typ, v)
		case fMetaLabels:
			ok = typ == protowire.BytesType && label(c, v)
		case fMetaCreated:
			c.has |= hasCreated
			ok = typ == protowire.BytesType && wire.Once(&seen, num) && wireStamp(v, &c.created)
		case fMetaDeleted:
			c.has |= hasDeleted
			ok = typ == protowire.BytesType && wire.Once(&seen, num) && wireStamp(v, &c.deleted)
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
	k, v, ok := wire.MapEntry(data)
	if !ok {
		return false
	}
	if c.labels == nil {
		c.labels = make(map[string]string, 4)
	}
	c.labels[string(k)] = string(v)
	return true
}

func owner(data []byte, o *cachedOwner) bool {
	for len(data) > 0 {
		num, typ, v, rest, ok := wire.Next(data)
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
		num, typ, v, rest, ok := wire.Next(data)
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
		num, wt, v, rest, ok := wire.Next(data)
		if !ok {
			return false
		}
		data = rest
		switch num {
		case fConditionType:
			typ, ok = wire.String(wt, v)
		case fConditionStatus:
			status, ok = wire.String(wt, v)
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
		num, typ, v, rest, ok := wire.Next(data)
		if !ok {
			return false
		}
		data = rest
		var n uint64
		switch num {
		case fStampSeconds:
			n, ok = wire.Varint(typ, v)
			s.sec = int64(n)
		case fStampNanos:
			n, ok = wire.Varint(typ, v)
			s.nsec = int32(n)
		}
		if !ok {
			return false
		}
	}
	return true
}

// bytesField is the last value of the string field num of a message's wire form.
func bytesField(data []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	for len(data) > 0 {
		n, typ, v, rest, ok := wire.Next(data)
		if !ok {
			return nil, false
		}
		data = rest
		if n == num {
			if out, ok = wire.String(typ, v); !ok {
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
		n, typ, v, rest, ok := wire.Next(data)
		if !ok {
			return 0, false
		}
		data = rest
		if n == num {
			if out, ok = wire.Varint(typ, v); !ok {
				return 0, false
			}
		}
	}
	return out, true
}

// wireInterned is a string field's value, interned.
func wireInterned(typ protowire.Type, v []byte) (string, bool) {
	b, ok := wire.String(typ, v)
	return intern.Bytes(b), ok
}

func wireBool(typ protowire.Type, v []byte) (optBool, bool) {
	n, ok := wire.Varint(typ, v)
	if n != 0 {
		return boolTrue, ok
	}
	return boolFalse, ok
}

// The numbers of the fields wireCached reads, from the messages' descriptors.
var (
	fPodMeta, fPodSpec   = wire.Field(&pb.Pod{}, "metadata"), wire.Field(&pb.Pod{}, "spec")
	fPodStatus           = wire.Field(&pb.Pod{}, "status")
	fPodInternal         = wire.Field(&pb.Pod{}, "internal")
	fSpecNode            = wire.Field(&pb.PodSpec{}, "node_name")
	fInternalCorrelation = wire.Field(&pb.PodInternal{}, "correlation_id")

	fMetaName, fMetaNamespace = wire.Field(&pb.ObjectMeta{}, "name"), wire.Field(&pb.ObjectMeta{}, "namespace")
	fMetaUID, fMetaLabels     = wire.Field(&pb.ObjectMeta{}, "uid"), wire.Field(&pb.ObjectMeta{}, "labels")
	fMetaOwners               = wire.Field(&pb.ObjectMeta{}, "owner_references")
	fMetaCreated              = wire.Field(&pb.ObjectMeta{}, "creation_timestamp")
	fMetaDeleted              = wire.Field(&pb.ObjectMeta{}, "deletion_timestamp")

	fOwnerAPIVersion, fOwnerKind = wire.Field(&pb.OwnerReference{}, "api_version"), wire.Field(&pb.OwnerReference{}, "kind")
	fOwnerName, fOwnerUID        = wire.Field(&pb.OwnerReference{}, "name"), wire.Field(&pb.OwnerReference{}, "uid")
	fOwnerController             = wire.Field(&pb.OwnerReference{}, "controller")
	fOwnerBlock                  = wire.Field(&pb.OwnerReference{}, "block_owner_deletion")

	fStatusPhase, fStatusConditions = wire.Field(&pb.PodStatus{}, "phase"), wire.Field(&pb.PodStatus{}, "conditions")
	fStatusContainers               = wire.Field(&pb.PodStatus{}, "container_statuses")
	fConditionType                  = wire.Field(&pb.PodCondition{}, "type")
	fConditionStatus                = wire.Field(&pb.PodCondition{}, "status")
	fConditionAt                    = wire.Field(&pb.PodCondition{}, "last_transition_time")
	fContainerRestarts              = wire.Field(&pb.ContainerStatus{}, "restart_count")

	fStampSeconds, fStampNanos = wire.Field(&timestamppb.Timestamp{}, "seconds"), wire.Field(&timestamppb.Timestamp{}, "nanos")
)
