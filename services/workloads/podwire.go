package workloads

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/intern"
	"github.com/podbus/podbus/internal/podfields"
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
		case podfields.PodMeta, podfields.PodSpec, podfields.PodStatus, podfields.PodInternal:
		default:
			continue
		}
		if !f.FirstOf(&r.seen) {
			return nil, false
		}
		switch f.Num {
		case podfields.PodMeta:
			ok = r.meta(c, f.Value)
		case podfields.PodSpec:
			c.has |= hasSpec
			var node []byte
			node, ok = lastString(f.Value, podfields.SpecNode)
			c.node = intern.Bytes(node)
		case podfields.PodStatus:
			ok = r.status(c, f.Value)
		case podfields.PodInternal:
			c.has |= hasInternal
			r.correlation, ok = lastString(f.Value, podfields.InternalCorrelation)
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
		case podfields.MetaName:
			r.name, ok = f.StringBytes()
		case podfields.MetaNamespace:
			c.namespace, ok = podfields.Interned(f)
		case podfields.MetaUID:
			r.uid, ok = f.StringBytes()
		case podfields.MetaLabels:
			var k, v []byte
			if k, v, ok = f.MapEntry(); ok {
				if c.labels == nil {
					c.labels = make(map[string]string, 4)
				}
				c.labels[string(k)] = string(v)
			}
		case podfields.MetaCreated:
			c.has |= hasCreated
			c.created.sec, c.created.nsec, ok = f.Timestamp()
			ok = ok && f.FirstOf(&seen)
		case podfields.MetaDeleted:
			c.has |= hasDeleted
			c.deleted.sec, c.deleted.nsec, ok = f.Timestamp()
			ok = ok && f.FirstOf(&seen)
		case podfields.MetaOwners:
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
		case podfields.OwnerAPIVersion:
			o.apiVersion, ok = podfields.Interned(f)
		case podfields.OwnerKind:
			o.kind, ok = podfields.Interned(f)
		case podfields.OwnerName:
			o.name, ok = podfields.Interned(f)
		case podfields.OwnerUID:
			o.uid, ok = podfields.Interned(f)
		case podfields.OwnerController:
			o.controller, ok = wireBool(f)
		case podfields.OwnerBlock:
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
		case podfields.StatusPhase:
			c.phase, ok = podfields.Interned(f)
		case podfields.StatusConditions:
			ok = f.Type == protowire.BytesType && readyCondition(c, f.Value)
		case podfields.StatusContainers:
			var n uint64
			if ok = f.Type == protowire.BytesType; ok {
				n, ok = lastVarint(f.Value, podfields.ContainerRestarts)
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
		case podfields.ConditionType:
			typ, ok = f.StringBytes()
		case podfields.ConditionStatus:
			status, ok = f.StringBytes()
		case podfields.ConditionAt:
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

func wireBool(f bus.WireField) (optBool, bool) {
	n, ok := f.Varint()
	if n != 0 {
		return boolTrue, ok
	}
	return boolFalse, ok
}
