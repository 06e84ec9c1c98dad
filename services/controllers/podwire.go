package controllers

import (
	"bytes"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podfields"
)

// wireHead is what newPodEntry decodes of a pod (podMetaMask), read straight from its wire form:
// every change of every pod comes through the cache. It reports false, leaving the pod to the
// decoder, for anything but the plain form an encoder writes (a malformed pod, a string that is not
// UTF-8, a field of the wrong wire type, a message field given twice, which a decoder merges);
// TestWireHeadMatchesDecode and FuzzWireHead hold the two to the same result.
func (c *cache) wireHead(data []byte) (meta *metav1.ObjectMeta, labels labelSet, ok bool) {
	var name, uid []byte
	var pairs [][2][]byte
	meta = &metav1.ObjectMeta{}
	var seen uint64
	for len(data) > 0 {
		pf, rest, ok := bus.NextField(data)
		if !ok {
			return nil, nil, false
		}
		data = rest
		if pf.Num != podfields.PodMeta {
			continue
		}
		if !pf.FirstOf(&seen) {
			return nil, nil, false
		}
		var metaSeen uint64
		for v := pf.Value; len(v) > 0; {
			f, r, ok := bus.NextField(v)
			if !ok {
				return nil, nil, false
			}
			v = r
			var b []byte
			switch f.Num {
			case podfields.MetaName:
				name, ok = f.StringBytes()
			case podfields.MetaNamespace:
				b, ok = f.StringBytes()
				meta.Namespace = c.strs.Bytes(b)
			case podfields.MetaUID:
				uid, ok = f.StringBytes()
			case podfields.MetaLabels:
				var k, val []byte
				if k, val, ok = f.MapEntry(); ok {
					pairs = append(pairs, [2][]byte{k, val})
				}
			case podfields.MetaFinalizers:
				if b, ok = f.StringBytes(); ok {
					meta.Finalizers = append(meta.Finalizers, string(b))
				}
			case podfields.MetaDeleted:
				var sec int64
				var nsec int32
				if sec, nsec, ok = f.Timestamp(); ok && f.FirstOf(&metaSeen) {
					t := metav1.NewTime(time.Unix(sec, int64(nsec)).UTC())
					meta.DeletionTimestamp = &t
				} else {
					ok = false
				}
			case podfields.MetaOwners:
				var r metav1.OwnerReference
				if ok = f.Type == protowire.BytesType && c.wireOwner(f.Value, &r); ok {
					meta.OwnerReferences = append(meta.OwnerReferences, r)
				}
			}
			if !ok {
				return nil, nil, false
			}
		}
	}
	// The uid and the name share one allocation, as newPodEntry's do.
	ids := string(uid) + string(name)
	meta.UID, meta.Name = typesUID(ids[:len(uid)]), ids[len(uid):]
	return meta, c.labelPairs(pairs), true
}

// labelPairs is labelSet of a map's entries in wire order: a later entry of a key replaces an earlier
// one, as in the decoded map.
func (c *cache) labelPairs(pairs [][2][]byte) labelSet {
	if len(pairs) == 0 {
		return nil
	}
	// Stable, so that of one key's entries the last stays last.
	slices.SortStableFunc(pairs, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })
	ls := make(labelSet, 0, 2*len(pairs))
	for i, p := range pairs {
		if i+1 < len(pairs) && bytes.Equal(p[0], pairs[i+1][0]) {
			continue
		}
		ls = append(ls, c.strs.Bytes(p[0]), c.strs.Bytes(p[1]))
	}
	return c.labelSets.Get(ls)
}

func (c *cache) wireOwner(data []byte, r *metav1.OwnerReference) bool {
	for len(data) > 0 {
		f, rest, ok := bus.NextField(data)
		if !ok {
			return false
		}
		data = rest
		var b []byte
		var n uint64
		switch f.Num {
		case podfields.OwnerAPIVersion:
			b, ok = f.StringBytes()
			r.APIVersion = c.strs.Bytes(b)
		case podfields.OwnerKind:
			b, ok = f.StringBytes()
			r.Kind = c.strs.Bytes(b)
		case podfields.OwnerName:
			b, ok = f.StringBytes()
			r.Name = c.strs.Bytes(b)
		case podfields.OwnerUID:
			b, ok = f.StringBytes()
			r.UID = typesUID(c.strs.Bytes(b))
		case podfields.OwnerController:
			n, ok = f.Varint()
			r.Controller = sharedBool(new(n != 0))
		case podfields.OwnerBlock:
			n, ok = f.Varint()
			r.BlockOwnerDeletion = sharedBool(new(n != 0))
		}
		if !ok {
			return false
		}
	}
	return true
}
