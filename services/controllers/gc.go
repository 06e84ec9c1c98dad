package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The garbage collector, over the ownership graph of every stored kind (cache.track):
//
//	a dependent whose owners are all gone (checked live) ──▶ deleted (background propagation)
//	an owner deleting with foregroundDeletion ──▶ its dependents deleted; once none that blocks its
//	                                             deletion is left, the finalizer goes (and the owner)
//	an owner deleting with orphan ──▶ its uid removed from its dependents' ownerReferences, then the
//	                                  finalizer goes (and the owner)
//
// Pods change through the store's commands; other JSON kinds by compare-and-set on their bucket.
// Namespaces and nodes are never deleted here: they have deletion paths of their own.

// reasonGarbageCollected is why the collector deletes a pod, in the audit timeline.
const reasonGarbageCollected = "GarbageCollected"

func (s *Service) collect(ctx context.Context, uid string) error {
	o := s.objects[uid]
	if o == nil {
		return nil
	}
	if o.deleting {
		switch {
		case slices.Contains(o.finalizers, metav1.FinalizerOrphanDependents):
			return s.orphan(ctx, o)
		case slices.Contains(o.finalizers, metav1.FinalizerDeleteDependents):
			return s.foreground(ctx, o)
		}
		return nil
	}
	if len(o.owners) == 0 {
		return nil
	}
	for _, ref := range o.owners {
		if s.objects[string(ref.UID)] != nil {
			return nil
		}
		ok, err := s.ownerExists(ctx, o, ref)
		if err != nil || ok {
			return err
		}
	}
	metrics.Count("controllers.gc.deleted", 1)
	s.log.Info("deleting object whose owners are gone", "bucket", o.kind.Bucket, "object", o.ns+"/"+o.name)
	return s.deleteObject(ctx, o)
}

// ownerExists looks the owner up in its bucket: the watch of its kind may not have brought it yet. An
// owner of a kind podbus does not store is taken to exist.
func (s *Service) ownerExists(ctx context.Context, o *object, ref metav1.OwnerReference) (bool, error) {
	var kb *bus.KindBucket
	for i := range s.cfg.Kinds {
		if k := &s.cfg.Kinds[i]; k.APIVersion == ref.APIVersion && k.Kind == ref.Kind {
			kb = k
		}
	}
	if kb == nil {
		return true, nil
	}
	key := bus.NodeKey(ref.Name)
	if kb.Namespaced {
		key = bus.ObjectKey(o.ns, ref.Name)
	}
	e, err := s.kv[kb.Bucket].Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up owner %s %s: %w", ref.Kind, ref.Name, err)
	}
	var uid string
	switch kb.Bucket {
	case bus.BucketPods:
		p := &pb.Pod{}
		if err := proto.Unmarshal(e.Value(), p); err != nil {
			return true, nil
		}
		uid = p.GetMetadata().GetUid()
	case bus.BucketNodes:
		n := &pb.Node{}
		if err := proto.Unmarshal(e.Value(), n); err != nil {
			return true, nil
		}
		uid = n.GetMetadata().GetUid()
	default:
		var head struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(e.Value(), &head); err != nil {
			return true, nil
		}
		uid = string(head.Metadata.UID)
	}
	return uid == string(ref.UID), nil
}

// foreground deletes an owner's dependents and, once none blocks it, lets the owner go.
func (s *Service) foreground(ctx context.Context, o *object) error {
	blocking := 0
	for uid := range s.dependents[o.uid] {
		d := s.objects[uid]
		if d == nil {
			continue
		}
		if !d.deleting {
			if err := s.deleteObject(ctx, d); err != nil {
				return err
			}
		}
		for _, ref := range d.owners {
			if string(ref.UID) == o.uid && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
				blocking++
			}
		}
	}
	if blocking > 0 {
		return nil
	}
	return s.removeFinalizer(ctx, o, metav1.FinalizerDeleteDependents)
}

// orphan removes the owner from its dependents' ownerReferences, then lets it go.
func (s *Service) orphan(ctx context.Context, o *object) error {
	left := 0
	for uid := range s.dependents[o.uid] {
		d := s.objects[uid]
		if d == nil {
			continue
		}
		left++
		if err := s.dropOwner(ctx, d, o.uid); err != nil {
			return err
		}
	}
	if left > 0 {
		return nil // the dependents' changes come back on the watch
	}
	return s.removeFinalizer(ctx, o, metav1.FinalizerOrphanDependents)
}

// deleteObject deletes a dependent: a pod through the store; another object by compare-and-set, or,
// when finalizers hold it, by setting its deletionTimestamp.
func (s *Service) deleteObject(ctx context.Context, o *object) error {
	switch {
	case o.kind.Bucket == bus.BucketPods:
		pe := s.pods[o.key]
		if pe == nil {
			return nil
		}
		return s.deletePod(ctx, pe.pod(), nil, UserGC, "gc", reasonGarbageCollected)
	case o.kind.Proto || o.kind.Kind == "Namespace":
		return nil
	}
	return s.editJSON(ctx, o, func(meta map[string]any) (bool, bool) {
		if fin, _ := meta["finalizers"].([]any); len(fin) == 0 {
			return true, false
		}
		if meta["deletionTimestamp"] != nil {
			return false, false
		}
		meta["deletionTimestamp"] = metav1.Now().UTC().Format("2006-01-02T15:04:05Z")
		return false, true
	})
}

// dropOwner removes owner from a dependent's ownerReferences.
func (s *Service) dropOwner(ctx context.Context, d *object, owner string) error {
	switch {
	case d.kind.Bucket == bus.BucketPods:
		pe := s.pods[d.key]
		if pe == nil {
			return nil
		}
		p, err := s.storedPod(ctx, d.key, pe)
		if p == nil || err != nil {
			return err
		}
		p.Metadata.OwnerReferences = slices.DeleteFunc(p.Metadata.OwnerReferences, func(r *pb.OwnerReference) bool { return r.GetUid() == owner })
		return s.updatePod(ctx, p, pe.rev, UserGC, "gc-orphan")
	case d.kind.Proto:
		return nil
	}
	return s.editJSON(ctx, d, func(meta map[string]any) (bool, bool) {
		refs, _ := meta["ownerReferences"].([]any)
		kept := slices.DeleteFunc(slices.Clone(refs), func(r any) bool {
			m, _ := r.(map[string]any)
			return m["uid"] == owner
		})
		if len(kept) == len(refs) {
			return false, false
		}
		if len(kept) == 0 {
			delete(meta, "ownerReferences")
		} else {
			meta["ownerReferences"] = kept
		}
		return false, true
	})
}

// storedPod reads the whole pod the cache has at pe's revision, for a command that sends it back: nil
// when the bucket holds another revision (or none), whose change the watch brings, and with it the
// owner to examine again.
func (s *Service) storedPod(ctx context.Context, key string, pe *podEntry) (*pb.Pod, error) {
	e, err := s.kv[bus.BucketPods].Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pod %s: %w", key, err)
	}
	if e.Revision() != pe.rev {
		return nil, nil
	}
	p := &pb.Pod{}
	if err := proto.Unmarshal(e.Value(), p); err != nil {
		return nil, fmt.Errorf("decode pod %s: %w", key, err)
	}
	if p.GetMetadata().GetUid() != pe.uid {
		return nil, nil
	}
	return p, nil
}

// removeFinalizer removes f from an object being deleted; none left, the object goes.
func (s *Service) removeFinalizer(ctx context.Context, o *object, f string) error {
	if o.kind.Proto {
		return nil
	}
	return s.editJSON(ctx, o, func(meta map[string]any) (bool, bool) {
		fin, _ := meta["finalizers"].([]any)
		kept := slices.DeleteFunc(slices.Clone(fin), func(x any) bool { return x == f })
		if len(kept) == 0 && meta["deletionTimestamp"] != nil {
			return true, false
		}
		if len(kept) == len(fin) {
			return false, false
		}
		meta["finalizers"] = kept
		return false, true
	})
}

// editJSON reads o's stored JSON (this uid only) and applies edit to its metadata: del deletes the
// object, changed writes it back; both by compare-and-set. Losing a race is no error: the watch brings
// the newer object, which is examined again.
func (s *Service) editJSON(ctx context.Context, o *object, edit func(meta map[string]any) (del, changed bool)) error {
	kv := s.kv[o.kind.Bucket]
	e, err := kv.Get(ctx, o.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s/%s: %w", o.kind.Bucket, o.key, err)
	}
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(e.Value()))
	dec.UseNumber() // numbers written back as they were
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("decode %s/%s: %w", o.kind.Bucket, o.key, err)
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil || meta["uid"] != o.uid {
		return nil
	}
	del, changed := edit(meta)
	switch {
	case del:
		err = bus.Delete(ctx, kv, o.key, e.Revision())
	case changed:
		var data []byte
		if data, err = json.Marshal(obj); err == nil {
			_, err = bus.UpdateEncoded(ctx, kv, o.key, data, e.Revision())
		}
	}
	if errors.Is(err, bus.ErrConflict) {
		return nil
	}
	return err
}
