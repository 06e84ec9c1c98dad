package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
)

// Namespaces follow kube's lifecycle:
//
//	create ──▶ Active (spec.finalizers: [kubernetes])
//	DELETE ──▶ Terminating (metadata.deletionTimestamp set): creates in it are refused (403)
//	        ──▶ the namespace controller (services/namespaces) deletes its pods, then its other
//	            objects, removes the kubernetes finalizer and the namespace record ──▶ gone
//
// Creating an object in a namespace that does not exist is refused (404), as kube's NamespaceLifecycle
// admission plugin does; systemNamespaces exist from the start.

// systemNamespaces are created at startup, as kube-apiserver creates them.
var systemNamespaces = []string{"default", "kube-node-lease", "kube-public", "kube-system"}

// undeletableNamespaces cannot be deleted, as in kube.
var undeletableNamespaces = []string{"default", "kube-public", "kube-system"}

var namespaceKind = &kind{
	version: "v1", kind: "Namespace", resource: "namespaces", singular: "namespace", shortNames: []string{"ns"},
	newObject: func() runtime.Object { return &corev1.Namespace{} },
	columns:   namespaceColumns,
	cells:     func(o runtime.Object) []any { return namespaceRow(o.(*corev1.Namespace)) },
	fields: func(o runtime.Object) fields.Set {
		n := o.(*corev1.Namespace)
		return fields.Set{"metadata.name": n.Name, "status.phase": string(n.Status.Phase)}
	},
	storage: jsonStorage(bus.BucketSpec{Name: bus.BucketNamespaces, Description: "podbus namespaces", History: 4},
		func() runtime.Object { return &corev1.Namespace{} }),
	strategy: strategy{
		prepareForCreate: func(o runtime.Object) { prepareNamespace(o.(*corev1.Namespace)) },
		validate:         func(o runtime.Object) field.ErrorList { return convert.ValidateNamespace(o.(*corev1.Namespace)) },
		// spec.finalizers change through the finalize subresource only (the controller), status never
		// through the API.
		prepareForUpdate: func(o, old runtime.Object, _ string) {
			n, on := o.(*corev1.Namespace), old.(*corev1.Namespace)
			n.Spec, n.Status = on.Spec, on.Status
			setNameLabel(n)
		},
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			return convert.ValidateNamespaceUpdate(o.(*corev1.Namespace), old.(*corev1.Namespace))
		},
		delete: deleteNamespace,
	},
}

// prepareNamespace sets what every new namespace has.
func prepareNamespace(n *corev1.Namespace) {
	n.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	n.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	setNameLabel(n)
}

func setNameLabel(n *corev1.Namespace) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[corev1.LabelMetadataName] = n.Name
}

// ensureNamespace creates a namespace unless it exists.
func (s *Service) ensureNamespace(ctx context.Context, name string) error {
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID(uuid.NewString()), CreationTimestamp: metav1.NewTime(metav1.Now().Rfc3339Copy().Time),
	}}
	prepareNamespace(n)
	data, err := namespaceKind.storage.encode(n)
	if err != nil {
		return err
	}
	_, err = bus.CreateEncoded(ctx, s.buckets[bus.BucketNamespaces], bus.NodeKey(name), data)
	if err != nil && !errors.Is(err, bus.ErrExists) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// deleteNamespace marks the namespace terminating; the namespace controller finishes the deletion.
// A namespace without finalizers goes at once.
func deleteNamespace(ctx context.Context, s *Service, req request, obj runtime.Object, rev uint64) (runtime.Object, error) {
	n := obj.(*corev1.Namespace)
	if slices.Contains(undeletableNamespaces, n.Name) {
		return nil, apierrors.NewForbidden(grNamespaces, n.Name, errors.New("this namespace may not be deleted"))
	}
	if n.DeletionTimestamp != nil {
		//lint:ignore ST1005 Kubernetes' exact message
		return nil, apierrors.NewConflict(grNamespaces, n.Name, errors.New("The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system."))
	}
	if len(n.Spec.Finalizers) == 0 && len(n.Finalizers) == 0 {
		return nil, bus.Delete(ctx, s.buckets[bus.BucketNamespaces], bus.NodeKey(n.Name), rev)
	}
	now := metav1.NewTime(metav1.Now().Rfc3339Copy().Time)
	var zero int64
	n.DeletionTimestamp, n.DeletionGracePeriodSeconds = &now, &zero
	n.Status.Phase = corev1.NamespaceTerminating
	newRev, err := s.writeObject(ctx, req.kind, n, rev)
	if err != nil {
		return nil, err
	}
	req.kind.stamp(n, newRev)
	return n, nil
}

// admitNamespace refuses to create an object named name of kind k in a namespace that does not exist
// or is being terminated, as kube's NamespaceLifecycle admission plugin does.
// Like kube's plugin, it reads the namespace from the watch cache and only a namespace the cache does
// not hold (yet) from the bucket, so a create costs no read of the store.
func (s *Service) admitNamespace(ctx context.Context, k *kind, name, ns string) error {
	if c := s.cache(namespaceKind); c.isReady() {
		// The phase is one of the cache's selectable fields, so a create decodes nothing. deleteNamespace
		// sets it with the deletion timestamp, and it is what kube's plugin checks.
		if phase, ok := c.field(ns, "status.phase"); ok {
			if phase == string(corev1.NamespaceTerminating) {
				return terminatingNamespace(k, name, ns)
			}
			return nil
		}
	}
	stored, _, err := s.getEntry(ctx, namespaceKind, "", ns)
	if err != nil {
		return err
	}
	if n := stored.(*corev1.Namespace); n.DeletionTimestamp != nil || n.Status.Phase == corev1.NamespaceTerminating {
		return terminatingNamespace(k, name, ns)
	}
	return nil
}

// terminatingNamespace is kube's refusal of a create into a terminating namespace.
func terminatingNamespace(k *kind, name, ns string) error {
	err := apierrors.NewForbidden(k.gr(), name, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: corev1.NamespaceTerminatingCause, Message: fmt.Sprintf("namespace %s is being terminated", ns), Field: "metadata.namespace",
	})
	return err
}
