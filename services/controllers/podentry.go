package controllers

import (
	"maps"
	"slices"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// podEntry is a cached pod: decoded, the metadata every controller filters on (namespace, name, uid,
// labels, owners); as bytes, the few other fields the DaemonSets, budgets and collector read of the
// pods they act on (podDataMask). A controller that sends a whole pod back reads it from the bucket.
type podEntry struct {
	ns, name, uid string
	labels        labelSet
	owners        []metav1.OwnerReference // shared with the collector's object
	data          []byte                  // the stored pod pruned to podDataMask
	rev           uint64
}

// podMetaMask is what newPodEntry decodes of a stored pod: the filters' metadata, and the collector's.
var podMetaMask = bus.NewMask(&pb.Pod{}, "metadata.name", "metadata.namespace", "metadata.uid",
	"metadata.labels", "metadata.owner_references", "metadata.finalizers", "metadata.deletion_timestamp")

// podDataMask is every other field the controllers read of a cached pod (podEntry.pod): the
// DaemonSets its node (bound, or pinned by matchFields), phase, readiness, age and deletion; the
// budgets its readiness and deletion; every pod command its correlation id. Of the conditions the
// entry keeps Ready's alone. A new read of a cached pod's field needs its path here
// (TestPodEntryDecisions compares decisions on whole pods).
var podDataMask = bus.NewMask(&pb.Pod{}, "metadata.creation_timestamp", "metadata.deletion_timestamp",
	"spec.node_name", "spec.affinity.node_affinity.required.terms.match_fields",
	"status.phase", "status.conditions.type", "status.conditions.status", "status.conditions.last_transition_time",
	"internal.correlation_id")

// newPodEntry decodes a stored pod's metadata and keeps the rest the controllers read, sharing the
// strings many pods repeat; meta is the collector's view of the same pod.
func (c *cache) newPodEntry(data []byte, rev uint64) (pe *podEntry, meta *metav1.ObjectMeta, ok bool) {
	meta, labels, ok := c.wireHead(data)
	if !ok {
		if meta, labels, ok = c.decodeHead(data); !ok {
			return nil, nil, false
		}
	}
	rest, ok := readyOnly(data)
	if !ok {
		return nil, nil, false
	}
	pe = &podEntry{ns: meta.Namespace, name: meta.Name, uid: string(meta.UID), labels: labels,
		owners: meta.OwnerReferences, data: rest, rev: rev}
	return pe, meta, true
}

// decodeHead is wireHead through the decoder, which takes any form of the pod.
func (c *cache) decodeHead(data []byte) (meta *metav1.ObjectMeta, labels labelSet, ok bool) {
	head, ok := bus.Prune(data, podMetaMask)
	p := &pb.Pod{}
	if !ok || proto.Unmarshal(head, p) != nil {
		return nil, nil, false
	}
	md := p.GetMetadata()
	// The uid and the name share one allocation: a full cluster's every pod is an entry here.
	ids := md.GetUid() + md.GetName()
	uid, name := ids[:len(md.GetUid())], ids[len(md.GetUid()):]
	meta = &metav1.ObjectMeta{Name: name, Namespace: c.strs.Get(md.GetNamespace()), UID: typesUID(uid),
		Finalizers: md.GetFinalizers()}
	if md.GetDeletionTimestamp() != nil {
		t := metav1.NewTime(md.GetDeletionTimestamp().AsTime())
		meta.DeletionTimestamp = &t
	}
	if refs := md.GetOwnerReferences(); len(refs) > 0 {
		meta.OwnerReferences = make([]metav1.OwnerReference, len(refs))
		for i, r := range refs {
			meta.OwnerReferences[i] = metav1.OwnerReference{APIVersion: c.strs.Get(r.GetApiVersion()), Kind: c.strs.Get(r.GetKind()),
				Name: c.strs.Get(r.GetName()), UID: typesUID(c.strs.Get(r.GetUid())), Controller: sharedBool(r.Controller),
				BlockOwnerDeletion: sharedBool(r.BlockOwnerDeletion)}
		}
	}
	return meta, c.labelSet(md.GetLabels()), true
}

// readyOnly is a stored pod pruned to podDataMask, of its conditions only Ready: the one the
// controllers read, where a running pod has five. The other conditions are cut out of the wire form:
// every change of every pod comes through here.
func readyOnly(data []byte) ([]byte, bool) {
	rest, ok := bus.Prune(data, podDataMask)
	if !ok {
		return nil, false
	}
	return dropConditions(rest)
}

var (
	podStatusNum     = bus.FieldNumber(&pb.Pod{}, "status")
	statusCondsNum   = bus.FieldNumber(&pb.PodStatus{}, "conditions")
	conditionTypeNum = bus.FieldNumber(&pb.PodCondition{}, "type")
)

// dropConditions removes from a pod's wire form every status condition but Ready, in each occurrence
// of its status; data itself when there is none to remove. False when data is malformed.
func dropConditions(data []byte) ([]byte, bool) {
	out, _, ok := bus.EditFields(data, func(f bus.WireField) (bus.FieldEdit, []byte) {
		if f.Num != podStatusNum || f.Type != protowire.BytesType {
			return bus.KeepField, nil
		}
		st, changed, ok := bus.EditFields(f.Value, readyCondition)
		switch {
		case !ok:
			return bus.RefuseField, nil
		case !changed:
			return bus.KeepField, nil
		}
		return bus.ReplaceField, st
	})
	return out, ok
}

// readyCondition keeps a PodStatus's Ready condition and drops its others.
func readyCondition(f bus.WireField) (bus.FieldEdit, []byte) {
	if f.Num != statusCondsNum || f.Type != protowire.BytesType {
		return bus.KeepField, nil
	}
	t, ok := conditionType(f.Value)
	switch {
	case !ok:
		return bus.RefuseField, nil
	case string(t) != "Ready":
		return bus.DropField, nil
	}
	return bus.KeepField, nil
}

// conditionType is a PodCondition's type as a decoder reads it: the last occurrence wins.
func conditionType(data []byte) ([]byte, bool) {
	var t []byte
	ok := bus.EachField(data, func(f bus.WireField) bool {
		if f.Num == conditionTypeNum && f.Type == protowire.BytesType {
			t = f.Value
		}
		return true
	})
	return t, ok
}

// pod decodes what the entry keeps of the pod, a copy of its own. The bytes were pruned from a pod
// that decoded, so this does not fail but for a bug, when it returns the metadata alone.
func (pe *podEntry) pod() *pb.Pod {
	p := &pb.Pod{}
	if proto.Unmarshal(pe.data, p) != nil {
		p.Reset()
	}
	if p.Metadata == nil {
		p.Metadata = &pb.ObjectMeta{}
	}
	md := p.Metadata
	md.Name, md.Namespace, md.Uid = pe.name, pe.ns, pe.uid
	if len(pe.labels) > 0 {
		md.Labels = make(map[string]string, len(pe.labels)/2)
		for i := 0; i < len(pe.labels); i += 2 {
			md.Labels[pe.labels[i]] = pe.labels[i+1]
		}
	}
	for _, r := range pe.owners {
		md.OwnerReferences = append(md.OwnerReferences, &pb.OwnerReference{ApiVersion: r.APIVersion, Kind: r.Kind, Name: r.Name,
			Uid: string(r.UID), Controller: cloneBool(r.Controller), BlockOwnerDeletion: cloneBool(r.BlockOwnerDeletion)})
	}
	return p
}

// controlledBy reports whether uid is the pod's controller.
func (pe *podEntry) controlledBy(uid string) bool {
	for _, r := range pe.owners {
		if r.Controller != nil && *r.Controller && string(r.UID) == uid {
			return true
		}
	}
	return false
}

// labelSet is a pod's labels as sorted key, value pairs: a fraction of a map's size. It is a
// labels.Labels.
type labelSet []string

// labelSet is m sorted, shared with every cached pod of the same labels (a workload's pods have the
// same): one slice per set rather than per pod.
func (c *cache) labelSet(m map[string]string) labelSet {
	if len(m) == 0 {
		return nil
	}
	ls := make(labelSet, 0, 2*len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		ls = append(ls, c.strs.Get(k), c.strs.Get(m[k]))
	}
	return c.labelSets.Get(ls)
}

// Lookup is the value of a label and whether it is set.
func (ls labelSet) Lookup(key string) (string, bool) {
	i := sort.Search(len(ls)/2, func(i int) bool { return ls[2*i] >= key })
	if 2*i < len(ls) && ls[2*i] == key {
		return ls[2*i+1], true
	}
	return "", false
}

// Has reports whether a label is set.
func (ls labelSet) Has(key string) bool {
	_, ok := ls.Lookup(key)
	return ok
}

// Get is a label's value, "" when not set.
func (ls labelSet) Get(key string) string {
	v, _ := ls.Lookup(key)
	return v
}

var sharedTrue, sharedFalse = true, false

// sharedBool is b as one of two pointers all entries share: nobody writes through them.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &sharedTrue
	}
	return &sharedFalse
}

func cloneBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	return proto.Bool(*b)
}
