package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podbus/podbus/bus"
)

// kvStorage keeps a kind in one KV bucket: key = the object's name (cluster-scoped) or namespace and
// name (bus.ObjectKey), resourceVersion = the entry's revision.
type kvStorage struct {
	spec bus.BucketSpec
	// pipeline: the bucket is one of the pipeline's, provisioned by bus.Provision (only Name is used).
	pipeline bool
	// encode and decode convert between the API object and its stored form.
	encode func(runtime.Object) ([]byte, error)
	decode func([]byte) (runtime.Object, error)
	// decodeKey, when set, replaces decode for values whose decoding depends on their key (sealed ones).
	decodeKey func(key string, value []byte) (runtime.Object, error)
	// index, when set, reads the labels and the selectable fields (kind.fields) of a stored value
	// without making the API object: the watch cache indexes every change of the bucket, and serves
	// objects from their stored bytes.
	index func([]byte) (map[string]string, fields.Set, error)
}

// jsonStorage stores the API object's own JSON, without type and resourceVersion: for kinds no other
// service decodes in the hot path, so they need no protobuf message.
func jsonStorage(spec bus.BucketSpec, newObject func() runtime.Object) *kvStorage {
	return &kvStorage{
		spec: spec,
		encode: func(o runtime.Object) ([]byte, error) {
			c := o.DeepCopyObject()
			m := objectMeta(c)
			m.ResourceVersion = ""
			c.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{}) // the bucket says what it holds
			return json.Marshal(c)
		},
		decode: func(data []byte) (runtime.Object, error) {
			o := newObject()
			if err := json.Unmarshal(data, o); err != nil {
				return nil, errors.Join(bus.ErrMalformed, err)
			}
			return o, nil
		},
	}
}

func (k *kind) key(ns, name string) string {
	if k.namespaced {
		return bus.ObjectKey(ns, name)
	}
	return bus.NodeKey(name)
}

// keyFilter selects the keys of one namespace ("" all).
func (k *kind) keyFilter(ns string) string {
	if k.namespaced {
		return bus.PodKeyPrefix(ns)
	}
	return ">"
}

// decodeEntry turns a stored value into the API object with resourceVersion rev.
func (k *kind) decodeEntry(key string, value []byte, rev uint64) (runtime.Object, error) {
	decode := k.storage.decode
	if k.storage.decodeKey != nil {
		decode = func(v []byte) (runtime.Object, error) { return k.storage.decodeKey(key, v) }
	}
	o, err := decode(value)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", k.resource, err)
	}
	k.stamp(o, rev)
	return o, nil
}

// stamp sets the type and resourceVersion the API shows.
func (k *kind) stamp(o runtime.Object, rev uint64) {
	o.GetObjectKind().SetGroupVersionKind(k.gv().WithKind(k.kind))
	if rev != 0 {
		objectMeta(o).ResourceVersion = strconv.FormatUint(rev, 10)
	}
}

// source serves k's bucket.
func (s *Service) source(k *kind) *kvSource {
	return &kvSource{kv: s.buckets[k.storage.spec.Name], ki: k, decode: k.decodeEntry, reads: &s.kvReads}
}
