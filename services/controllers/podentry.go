package controllers

import (
	"bytes"

	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// podEntry is a cached pod: its stored bytes, and decoded only the metadata every controller filters
// on (namespace, name, uid, labels, owners, deletion). The collector, DaemonSets and budgets read a
// whole pod only for those they act on, so the cache costs little more than the stored form per pod.
type podEntry struct {
	meta *pb.Pod // Metadata only
	data []byte  // the stored pod, owned by the entry
	rev  uint64
}

// newPodEntry decodes a stored pod; data is copied, so that the message it came in can be freed.
func newPodEntry(data []byte, rev uint64) (*podEntry, error) {
	p := &pb.Pod{}
	if err := proto.Unmarshal(data, p); err != nil {
		return nil, err
	}
	md := p.GetMetadata()
	meta := &pb.ObjectMeta{
		Name: md.GetName(), Namespace: md.GetNamespace(), Uid: md.GetUid(), Labels: md.GetLabels(),
		OwnerReferences: md.GetOwnerReferences(), DeletionTimestamp: md.GetDeletionTimestamp(),
		Finalizers: md.GetFinalizers(),
	}
	return &podEntry{meta: &pb.Pod{Metadata: meta}, data: bytes.Clone(data), rev: rev}, nil
}

// pod decodes the whole pod, a copy of its own; the entry decoded once already, so this does not fail
// but for a bug, when it returns the metadata alone.
func (pe *podEntry) pod() *pb.Pod {
	p := &pb.Pod{}
	if proto.Unmarshal(pe.data, p) != nil {
		return proto.Clone(pe.meta).(*pb.Pod)
	}
	return p
}
