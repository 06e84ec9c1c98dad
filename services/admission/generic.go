package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
)

// The generic handlers serve a kind kept in a KV bucket: every write is a compare-and-set on the
// revision read, so concurrent replicas and other writers (the status service on nodes, the namespace
// controller on namespaces) never lose an update.

// updateAttemptsKV bounds the re-read-and-retry loop of an update that lost a compare-and-set.
const updateAttemptsKV = 16

// retryConflicts runs once, which reads an object and writes it back at the revision read, again while
// another write comes first (bus.ErrConflict), up to updateAttemptsKV times, as kube-apiserver's
// GuaranteedUpdate does; then, or at once when the client gave a precondition, the answer is k's
// Conflict. retries names the metric counting the attempts after the first.
func retryConflicts[T any](k *kind, name string, precondition bool, retries string, once func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := once()
		if !errors.Is(err, bus.ErrConflict) {
			return v, err
		}
		if precondition || attempt >= updateAttemptsKV {
			return v, conflictError(k, name)
		}
		metrics.Count(retries, 1)
	}
}

// verbOf is the API verb of a request.
func verbOf(r *http.Request, req request) string {
	switch r.Method {
	case http.MethodGet:
		switch {
		case req.watch:
			return "watch"
		case req.name == "":
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// serveGeneric routes one request for a KV-backed kind, to the kind's own handler where it has one.
func (s *Service) serveGeneric(w http.ResponseWriter, r *http.Request, req request) {
	k := req.kind
	verb := verbOf(r, req)
	if k.namespaced && req.ns == "" && req.name != "" {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if req.sub != "" {
		i := slices.IndexFunc(k.subresources, func(sr subresourceInfo) bool { return sr.name == req.sub })
		if i < 0 || req.name == "" || req.watch {
			writeStatus(w, notFoundPath(r.URL.Path))
			return
		}
		if !slices.Contains(k.subresources[i].verbs, verb) {
			writeStatus(w, methodNotAllowed(k.gr(), r.Method))
			return
		}
		if h := k.handlers.sub[req.sub]; h != nil {
			h(s, w, r, req)
			return
		}
	} else if !slices.Contains(k.servedVerbs(), verb) {
		writeStatus(w, methodNotAllowed(k.gr(), r.Method))
		return
	}
	switch verb {
	case "list", "watch":
		s.listOrWatchCached(w, r, req)
	case "get":
		o, _, err := s.source(k).get(r.Context(), k.key(req.ns, req.name), req.name)
		if err != nil {
			writeStatus(w, err)
			return
		}
		writeObject(w, http.StatusOK, req, k, o)
	case "create":
		if req.name != "" || (k.namespaced && req.ns == "") {
			writeStatus(w, methodNotAllowed(k.gr(), r.Method))
			return
		}
		or(k.handlers.create, (*Service).createObject)(s, w, r, req)
	case "update", "patch":
		if req.name == "" {
			writeStatus(w, methodNotAllowed(k.gr(), r.Method))
			return
		}
		or(k.handlers.update, (*Service).updateObject)(s, w, r, req)
	case "delete":
		if req.name == "" {
			writeStatus(w, methodNotAllowed(k.gr(), r.Method))
			return
		}
		or(k.handlers.delete, (*Service).deleteObject)(s, w, r, req)
	default:
		writeStatus(w, methodNotAllowed(k.gr(), r.Method))
	}
}

func or(h, generic handlerFunc) handlerFunc {
	if h != nil {
		return h
	}
	return generic
}

// decodeBody reads and decodes one object of req's kind from the request body.
func (s *Service) decodeBody(w http.ResponseWriter, r *http.Request, k *kind) (runtime.Object, []string, error) {
	mode, err := fieldValidation(r)
	if err != nil {
		return nil, nil, err
	}
	data, err := s.readBody(w, r)
	if err != nil {
		return nil, nil, err
	}
	data, err = toJSON(data, r.Header.Get("Content-Type"), mode == validationStrict, k)
	if err != nil {
		return nil, nil, err
	}
	obj := k.newObject()
	warnings, err := decodeStrict(data, mode, k, obj)
	if err != nil {
		return nil, nil, err
	}
	if err := checkTypeMeta(obj.GetObjectKind(), k); err != nil {
		return nil, nil, err
	}
	return obj, warnings, nil
}

// createObject decodes, defaults, validates and stores a new object (create-if-absent).
func (s *Service) createObject(w http.ResponseWriter, r *http.Request, req request) {
	k := req.kind
	obj, warnings, err := s.decodeBody(w, r, k)
	if err != nil {
		writeStatus(w, err)
		return
	}
	m := objectMeta(obj)
	if k.namespaced {
		if m.Namespace == "" {
			m.Namespace = req.ns
		} else if m.Namespace != req.ns {
			writeStatus(w, badRequest("the namespace of the provided object does not match the namespace sent on the request"))
			return
		}
	} else {
		m.Namespace = ""
	}
	if m.Name == "" && m.GenerateName != "" {
		m.Name = generateName(m.GenerateName)
	}
	if k.namespaced {
		if err := s.admitNamespace(r.Context(), k, m.Name, req.ns); err != nil {
			writeStatus(w, err)
			return
		}
	}
	// Server-owned metadata, as every strategy's PrepareForCreate resets it.
	m.UID = types.UID(uuid.NewString())
	m.CreationTimestamp = metav1.NewTime(metav1.Now().Rfc3339Copy().Time)
	m.ResourceVersion = ""
	m.DeletionTimestamp, m.DeletionGracePeriodSeconds = nil, nil
	m.Generation = 0
	if f := k.strategy.prepareForCreate; f != nil {
		f(obj)
	}
	if errs := k.validate(obj); len(errs) > 0 {
		writeStatus(w, apierrors.NewInvalid(k.gk(), m.Name, errs))
		return
	}
	if f := k.strategy.admit; f != nil {
		if err := f(s, r.Context(), req, obj, nil); err != nil {
			writeStatus(w, err)
			return
		}
	}
	addWarnings(w, warnings)
	k.stamp(obj, 0)
	if dryRun(req) {
		writeObject(w, http.StatusCreated, req, k, obj)
		return
	}
	data, err := k.storage.encode(obj)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("encode %s %s: %w", k.resource, m.Name, err)))
		return
	}
	if err := s.checkObjectSize(len(data)); err != nil {
		writeStatus(w, err)
		return
	}
	rev, err := bus.CreateEncoded(r.Context(), s.buckets[k.storage.spec.Name], k.key(m.Namespace, m.Name), data)
	if errors.Is(err, bus.ErrExists) {
		writeStatus(w, apierrors.NewAlreadyExists(k.gr(), m.Name))
		return
	}
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("create %s %s: %w", k.resource, m.Name, err)))
		return
	}
	k.stamp(obj, rev)
	writeObject(w, http.StatusCreated, req, k, obj)
}

// updateObject serves PUT and PATCH (strategic merge, JSON merge, JSON patch) of an object or of its
// status subresource.
func (s *Service) updateObject(w http.ResponseWriter, r *http.Request, req request) {
	k := req.kind
	mode, err := fieldValidation(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	// A resourceVersion in the body is a precondition: then a lost race is the client's Conflict;
	// otherwise the change is applied again on top of the newer object.
	apply, precondition, err := s.updateRequest(w, r, mode, k, reflect.ValueOf(k.newObject()).Elem().Interface())
	if err != nil {
		writeStatus(w, err)
		return
	}
	var warnings []string
	out, err := retryConflicts(k, req.name, precondition, "admission.update.retries", func() (out runtime.Object, err error) {
		out, warnings, err = s.updateStored(r.Context(), req, mode, apply)
		return out, err
	})
	if err != nil {
		writeStatus(w, err)
		return
	}
	addWarnings(w, warnings)
	writeObject(w, http.StatusOK, req, k, out)
}

// getEntry reads one stored object; a 404 Status when absent.
func (s *Service) getEntry(ctx context.Context, k *kind, ns, name string) (runtime.Object, uint64, error) {
	return s.source(k).get(ctx, k.key(ns, name), name)
}

// updateStored reads the object, applies the change, validates it and writes it back (CAS on the revision
// read). bus.ErrConflict: the object changed in between, or the body's resourceVersion is stale.
func (s *Service) updateStored(ctx context.Context, req request, mode string, apply func([]byte) ([]byte, error)) (runtime.Object, []string, error) {
	k := req.kind
	old, rev, err := s.getEntry(ctx, k, req.ns, req.name)
	if err != nil {
		return nil, nil, err
	}
	obj, warnings, err := applyUpdate(req, mode, old, apply)
	if err != nil {
		return nil, nil, err
	}
	if f := k.strategy.prepareForUpdate; f != nil {
		f(obj, old, req.sub)
	}
	k.stamp(obj, 0)
	if equality.Semantic.DeepEqual(obj, old) {
		return old, warnings, nil
	}
	if errs := k.validateUpdate(obj, old); len(errs) > 0 {
		return nil, nil, apierrors.NewInvalid(k.gk(), req.name, errs)
	}
	if f := k.strategy.admit; f != nil {
		if err := f(s, ctx, req, obj, old); err != nil {
			return nil, nil, err
		}
	}
	if dryRun(req) {
		return obj, warnings, nil
	}
	newRev, err := s.writeObject(ctx, k, obj, rev)
	if err != nil {
		return nil, nil, err
	}
	if err := s.finishDeletion(ctx, k, obj, newRev); err != nil {
		return nil, nil, err
	}
	k.stamp(obj, newRev)
	return obj, warnings, nil
}

// applyUpdate applies an update (PUT body or patch) to old, decodes and checks the result, and copies
// from old the metadata the API owns, as every strategy's PrepareForUpdate does. bus.ErrConflict: the
// body names a resourceVersion other than old's.
func applyUpdate(req request, mode string, old runtime.Object, apply func([]byte) ([]byte, error)) (runtime.Object, []string, error) {
	k := req.kind
	cur, err := json.Marshal(old)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s: %w", k.resource, err)
	}
	patched, err := apply(cur)
	if err != nil {
		return nil, nil, err
	}
	obj := k.newObject()
	warnings, err := decodeStrict(patched, mode, k, obj)
	if err != nil {
		return nil, nil, err
	}
	if err := checkTypeMeta(obj.GetObjectKind(), k); err != nil {
		return nil, nil, err
	}
	m, om := objectMeta(obj), objectMeta(old)
	switch {
	case m.Name != "" && m.Name != req.name:
		return nil, nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", m.Name, req.name)
	case k.namespaced && m.Namespace != "" && m.Namespace != req.ns:
		return nil, nil, badRequest("the namespace of the provided object does not match the namespace sent on the request")
	case m.ResourceVersion != "" && m.ResourceVersion != om.ResourceVersion:
		return nil, nil, bus.ErrConflict
	case m.UID != "" && m.UID != om.UID:
		//lint:ignore ST1005 Kubernetes' exact message
		return nil, nil, apierrors.NewConflict(k.gr(), req.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", m.UID, om.UID))
	}
	m.Name, m.Namespace, m.UID, m.ResourceVersion = om.Name, om.Namespace, om.UID, om.ResourceVersion
	m.CreationTimestamp, m.Generation = om.CreationTimestamp, om.Generation
	m.DeletionTimestamp, m.DeletionGracePeriodSeconds = om.DeletionTimestamp, om.DeletionGracePeriodSeconds
	obj.GetObjectKind().SetGroupVersionKind(old.GetObjectKind().GroupVersionKind())
	return obj, warnings, nil
}

// writeObject stores obj over revision rev (compare-and-set).
func (s *Service) writeObject(ctx context.Context, k *kind, obj runtime.Object, rev uint64) (uint64, error) {
	m := objectMeta(obj)
	data, err := k.storage.encode(obj)
	if err != nil {
		return 0, fmt.Errorf("encode %s %s: %w", k.resource, m.Name, err)
	}
	if err := s.checkObjectSize(len(data)); err != nil {
		return 0, err
	}
	newRev, err := bus.UpdateEncoded(ctx, s.buckets[k.storage.spec.Name], k.key(m.Namespace, m.Name), data, rev)
	if err != nil {
		return 0, fmt.Errorf("update %s %s: %w", k.resource, m.Name, err)
	}
	return newRev, nil
}

func conflictError(k *kind, name string) error {
	return apierrors.NewConflict(k.gr(), name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// deleteObject removes an object (CAS), or hands it to the kind's delete hook (a graceful deletion). As
// kube-apiserver's storage does, a delete that loses its compare-and-set to another write (a
// controller's status update) reads the object again and deletes it anew: the client's preconditions
// are checked against each read, so only they turn another writer's change into a Conflict.
func (s *Service) deleteObject(w http.ResponseWriter, r *http.Request, req request) {
	k := req.kind
	opts, err := s.deleteOptions(w, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	var uid types.UID
	left, err := retryConflicts(k, req.name, false, "admission.delete.retries", func() (left runtime.Object, err error) {
		uid, left, err = s.deleteOnce(r.Context(), req, opts)
		return left, err
	})
	switch {
	case err != nil:
		writeStatus(w, err)
	case left != nil:
		writeObject(w, http.StatusOK, req, k, left)
	default:
		writeJSON(w, http.StatusOK, metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusSuccess,
			Details:  &metav1.StatusDetails{Name: req.name, Group: k.group, Kind: k.resource, UID: uid},
		})
	}
}

// deleteOnce reads the object, checks the delete's preconditions and deletes it at the revision read:
// its uid, and the object left when the deletion is graceful. bus.ErrConflict when another write came
// first.
func (s *Service) deleteOnce(ctx context.Context, req request, opts metav1.DeleteOptions) (types.UID, runtime.Object, error) {
	k := req.kind
	obj, rev, err := s.getEntry(ctx, k, req.ns, req.name)
	if err != nil {
		return "", nil, err
	}
	uid := objectMeta(obj).UID
	if pre := opts.Preconditions; pre != nil {
		if pre.UID != nil && *pre.UID != uid {
			//lint:ignore ST1005 Kubernetes' exact message
			return "", nil, apierrors.NewConflict(k.gr(), req.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *pre.UID, uid))
		}
		if pre.ResourceVersion != nil && *pre.ResourceVersion != strconv.FormatUint(rev, 10) {
			//lint:ignore ST1005 Kubernetes' exact message
			return "", nil, apierrors.NewConflict(k.gr(), req.name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *pre.ResourceVersion, rev))
		}
	}
	if dryRun(req) || len(opts.DryRun) > 0 {
		return uid, nil, nil
	}
	if f := k.strategy.delete; f != nil {
		left, err := f(ctx, s, req, obj, rev)
		return uid, left, err
	}
	policy, err := propagationPolicy(opts)
	if err != nil {
		return "", nil, err
	}
	left, err := s.deleteGeneric(ctx, k, obj, rev, policy)
	return uid, left, err
}
