package admission

//lint:file-ignore SA1019 orphanDependents is read for the clients that still send it

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/bus"
)

// Deletion with finalizers and a propagation policy, as kube-apiserver's generic registry does it for the
// garbage collector (services/controllers):
//
//	DELETE, policy Background (the default) ──▶ gone; the collector deletes the dependents later
//	DELETE, policy Foreground ──▶ finalizer foregroundDeletion + deletionTimestamp: the collector deletes
//	                               the dependents, then the finalizer, then the object
//	DELETE, policy Orphan     ──▶ finalizer orphan + deletionTimestamp: the collector removes the owner
//	                               from the dependents' ownerReferences, then the finalizer and the object
//	an object with finalizers  ──▶ deletionTimestamp; gone when an update leaves it none (finishDeletion)

// propagationPolicy is the policy a DeleteOptions asks for; Background when it names none. Old clients
// still send the deprecated orphanDependents, which kube-apiserver honours.
func propagationPolicy(opts metav1.DeleteOptions) (metav1.DeletionPropagation, error) {
	if opts.PropagationPolicy != nil && opts.OrphanDependents != nil {
		return "", apierrors.NewBadRequest("using both OrphanDependents and PropagationPolicy is not allowed")
	}
	if opts.OrphanDependents != nil {
		if *opts.OrphanDependents {
			return metav1.DeletePropagationOrphan, nil
		}
		return metav1.DeletePropagationBackground, nil
	}
	if opts.PropagationPolicy == nil {
		return metav1.DeletePropagationBackground, nil
	}
	switch p := *opts.PropagationPolicy; p {
	case metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan:
		return p, nil
	default:
		return "", apierrors.NewBadRequest(fmt.Sprintf("DeletionPropagation has invalid value %q; possible values are Orphan, Background and Foreground", p))
	}
}

// deleteGeneric removes a stored object at revision rev (CAS), or marks it deleting when finalizers hold
// it; it returns the object left (nil: gone).
func (s *Service) deleteGeneric(ctx context.Context, k *kind, obj runtime.Object, rev uint64, policy metav1.DeletionPropagation) (runtime.Object, error) {
	m := objectMeta(obj)
	fin := slices.Clone(m.Finalizers)
	switch policy {
	case metav1.DeletePropagationForeground:
		fin = addFinalizer(fin, metav1.FinalizerDeleteDependents)
	case metav1.DeletePropagationOrphan:
		fin = addFinalizer(fin, metav1.FinalizerOrphanDependents)
	}
	if len(fin) == 0 {
		return nil, bus.Delete(ctx, s.buckets[k.storage.spec.Name], k.key(m.Namespace, m.Name), rev)
	}
	if m.DeletionTimestamp != nil && slices.Equal(fin, m.Finalizers) {
		return obj, nil // already deleting, as asked
	}
	m.Finalizers = fin
	if m.DeletionTimestamp == nil {
		now := metav1.Now().Rfc3339Copy()
		zero := int64(0)
		m.DeletionTimestamp, m.DeletionGracePeriodSeconds = &now, &zero
	}
	newRev, err := s.writeObject(ctx, k, obj, rev)
	if err != nil {
		return nil, err
	}
	k.stamp(obj, newRev)
	return obj, nil
}

func addFinalizer(fin []string, f string) []string {
	if slices.Contains(fin, f) {
		return fin
	}
	return append(fin, f)
}

// finishDeletion removes an object being deleted that an update (at revision rev) left without finalizers.
func (s *Service) finishDeletion(ctx context.Context, k *kind, obj runtime.Object, rev uint64) error {
	m := objectMeta(obj)
	if k.strategy.delete != nil || m.DeletionTimestamp == nil || len(m.Finalizers) > 0 {
		return nil
	}
	return bus.Delete(ctx, s.buckets[k.storage.spec.Name], k.key(m.Namespace, m.Name), rev)
}

// KindBuckets are the stored kinds and their buckets, for the garbage collector: every object of them may
// own others or be owned. Pods and nodes hold protobuf messages, the others their JSON.
func KindBuckets() []bus.KindBucket {
	var out []bus.KindBucket
	for _, k := range builtinKinds() {
		if k.storage == nil || k.hot {
			continue
		}
		out = append(out, bus.KindBucket{APIVersion: k.apiVersion(), Kind: k.kind, Bucket: k.storage.spec.Name,
			Namespaced: k.namespaced, Proto: k.storage.pipeline})
	}
	return out
}
