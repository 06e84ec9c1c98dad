package admission

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
)

// The registry: one kind value per served resource, from which routing, discovery, OpenAPI, tables,
// selectors and the generic handlers (get, list, watch, create, update, patch, delete on a KV bucket)
// are derived, as kube-apiserver derives them from a resource's strategy.
//
//	URL ──route──▶ kind (group, version, resource) ──┬─ serve: the kind serves itself (events: a stream)
//	                                                 └─ generic handlers (verbs, subresources checked)
//	                                                      ├─ handlers: the kind's own, verb by verb (pods'
//	                                                      │    writes: the store's command path)
//	                                                      └─ strategy hooks ──▶ storage (KV bucket, CAS)
//
// A new kind is a file declaring its kind value (and its tests), plus its line in builtinKinds.

// kind describes one resource.
type kind struct {
	group, version, kind string
	resource, singular   string
	shortNames           []string
	categories           []string
	namespaced           bool
	// verbs served; nil: every verb of the generic handlers.
	verbs []string
	// newObject returns an empty object of the kind: decoding target, OpenAPI schema, field names.
	newObject func() runtime.Object
	// columns and cells print the kind as a Table row (kubectl get); nil: Name and Age.
	columns []metav1.TableColumnDefinition
	cells   func(runtime.Object) []any
	// fields are the fields a fieldSelector may name, with their values; nil: metadata.name and, for
	// namespaced kinds, metadata.namespace.
	fields func(runtime.Object) fields.Set
	// ownField, when set, is the one selectable field besides the name and namespace whose value is
	// each object's own (a pod's IP): the watch cache then shares the other fields' values among the
	// objects that have the same, one slice per distinct set rather than per object.
	ownField     string
	subresources []subresourceInfo
	// storage keeps the kind in a KV bucket; nil for a kind that serves itself.
	storage  *kvStorage
	strategy strategy
	// handlers replace generic handlers verb by verb (pods' writes go through the store).
	handlers handlers
	// serve replaces all the generic handlers (events come from a stream, not a bucket).
	serve handlerFunc
	// hot: the kind's bucket changes all the time and few read it (node leases, renewed on every
	// heartbeat). Its watch cache starts on first use rather than with the server, and the garbage
	// collector does not watch it (KindBuckets).
	hot bool
}

type handlerFunc func(s *Service, w http.ResponseWriter, r *http.Request, req request)

// handlers are a kind's own handlers; nil ones are the generic handlers.
type handlers struct {
	create, update, delete handlerFunc
	// subresources served by the kind itself (pods/log, pods/eviction), by name.
	sub map[string]handlerFunc
}

// strategy holds a kind's hooks around the generic handlers; every hook is optional.
type strategy struct {
	// prepareForCreate defaults the object and sets the fields the server owns beyond metadata.
	prepareForCreate func(obj runtime.Object)
	// validate and validateUpdate replace the default, the metadata's validation.
	validate func(obj runtime.Object) field.ErrorList
	// prepareForUpdate copies from old what an update of sub ("" or "status") may not change.
	prepareForUpdate func(obj, old runtime.Object, sub string)
	validateUpdate   func(obj, old runtime.Object) field.ErrorList
	// admit checks a validated create (old nil) or update against its requester (RBAC's escalation
	// check); an error refuses it.
	admit func(s *Service, ctx context.Context, req request, obj, old runtime.Object) error
	// delete replaces the immediate removal of the stored object (rev is its revision): it returns the
	// object as left (a graceful deletion) or nil when the object is gone.
	delete func(ctx context.Context, s *Service, req request, obj runtime.Object, rev uint64) (runtime.Object, error)
}

var allVerbs = []string{"create", "delete", "get", "list", "patch", "update", "watch"}

func (k *kind) apiVersion() string {
	if k.group == "" {
		return k.version
	}
	return k.group + "/" + k.version
}

func (k *kind) listKind() string { return k.kind + "List" }

func (k *kind) gr() schema.GroupResource {
	return schema.GroupResource{Group: k.group, Resource: k.resource}
}

func (k *kind) gk() schema.GroupKind { return schema.GroupKind{Group: k.group, Kind: k.kind} }

func (k *kind) gv() schema.GroupVersion {
	return schema.GroupVersion{Group: k.group, Version: k.version}
}

func (k *kind) meta(o runtime.Object) *metav1.ObjectMeta { return objectMeta(o) }

// defaultColumns print a kind without columns of its own, as kube-apiserver's default table does.
var defaultColumns = []metav1.TableColumnDefinition{
	col("Name", "string", "Name must be unique within a namespace.", 0),
	col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
}

func (k *kind) tableColumns() []metav1.TableColumnDefinition {
	if k.columns == nil {
		return defaultColumns
	}
	return k.columns
}

// row is the object's Table row.
func (k *kind) row(o runtime.Object) []any {
	if k.cells == nil {
		m := objectMeta(o)
		return []any{m.Name, since(m.CreationTimestamp)}
	}
	return k.cells(o)
}

// validate checks a new object: the kind's validation, or its metadata alone (a DNS subdomain name).
func (k *kind) validate(o runtime.Object) field.ErrorList {
	if k.strategy.validate != nil {
		return k.strategy.validate(o)
	}
	return apivalidation.ValidateObjectMeta(objectMeta(o), k.namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

// validateUpdate checks an update: the kind's validation, or its metadata alone.
func (k *kind) validateUpdate(o, old runtime.Object) field.ErrorList {
	if k.strategy.validateUpdate != nil {
		return k.strategy.validateUpdate(o, old)
	}
	errs := apivalidation.ValidateObjectMetaUpdate(objectMeta(o), objectMeta(old), field.NewPath("metadata"))
	return append(errs, k.validate(o)...)
}

func (k *kind) servedVerbs() []string {
	if k.verbs != nil {
		return k.verbs
	}
	return allVerbs
}

func (k *kind) fieldSet(o runtime.Object) fields.Set {
	if k.fields != nil {
		return k.fields(o)
	}
	m := objectMeta(o)
	fs := fields.Set{"metadata.name": m.Name}
	if k.namespaced {
		fs["metadata.namespace"] = m.Namespace
	}
	return fs
}

// objectMeta is the metadata of any API object (they all embed metav1.ObjectMeta).
func objectMeta(o runtime.Object) *metav1.ObjectMeta {
	return o.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta)
}

// registry is the set of served kinds.
type registry struct {
	kinds       []*kind
	openAPIOnce sync.Once
	openAPI     map[string]openAPIDoc // by path under /openapi/v3/

	openAPIV2Once                 sync.Once
	openAPIV2JSON, openAPIV2Proto []byte
}

// builtinKinds are the kinds podbus serves.
func builtinKinds() []*kind {
	return []*kind{
		withHandlers(podKind, handlers{
			create: (*Service).createPod,
			update: (*Service).updatePod,
			delete: (*Service).deletePod,
			sub: map[string]handlerFunc{"log": (*Service).podLogs, "eviction": (*Service).evictPod,
				"exec": (*Service).podExec, "attach": (*Service).podAttach, "portforward": (*Service).podPortForward},
		}),
		nodeKind,
		leaseKind,
		withServe(eventKind, (*Service).serveEvents),
		namespaceKind,
		configMapKind,
		secretKind,
		daemonSetKind,
		pdbKind,
		withHandlers(replicaSetKind, handlers{sub: map[string]handlerFunc{"scale": (*Service).serveScale}}),
		withHandlers(deploymentKind, handlers{sub: map[string]handlerFunc{"scale": (*Service).serveScale}}),
		roleKind,
		clusterRoleKind,
		roleBindingKind,
		clusterRoleBindingKind,
		withServe(selfSubjectAccessReviewKind, (*Service).serveSelfSubjectAccessReview),
		withServe(selfSubjectRulesReviewKind, (*Service).serveSelfSubjectRulesReview),
		withServe(podMetricsKind, (*Service).servePodMetrics),
		withServe(nodeMetricsKind, (*Service).serveNodeMetrics),
	}
}

// withServe is k serving itself. Handlers are attached here rather than in the kind's declaration,
// which the handlers themselves refer to.
func withServe(k *kind, serve handlerFunc) *kind {
	c := *k
	c.serve = serve
	return &c
}

// withHandlers is k with some handlers of its own.
func withHandlers(k *kind, h handlers) *kind {
	c := *k
	c.handlers = h
	return &c
}

func (r *registry) lookup(group, version, resource string) *kind {
	for _, k := range r.kinds {
		if k.group == group && k.version == version && k.resource == resource {
			return k
		}
	}
	return nil
}

// groupVersions lists the served group versions in registration order, the core group first.
func (r *registry) groupVersions() []schema.GroupVersion {
	var out []schema.GroupVersion
	for _, k := range r.kinds {
		if !slices.Contains(out, k.gv()) {
			out = append(out, k.gv())
		}
	}
	slices.SortStableFunc(out, func(a, b schema.GroupVersion) int {
		switch {
		case a.Group == "" && b.Group != "":
			return -1
		case a.Group != "" && b.Group == "":
			return 1
		}
		return strings.Compare(a.Group, b.Group)
	})
	return out
}

// in returns the kinds of one group version.
func (r *registry) in(gv schema.GroupVersion) []*kind {
	var out []*kind
	for _, k := range r.kinds {
		if k.gv() == gv {
			out = append(out, k)
		}
	}
	return out
}

// Buckets are the KV buckets of the served kinds, for bus.Options.Buckets: provisioning them with the
// pipeline's lets every service (the namespace controller among them) open them.
func Buckets() []bus.BucketSpec {
	return (&registry{kinds: builtinKinds()}).buckets()
}

// buckets are the buckets of the kinds, the pipeline's (pods, nodes) left out.
func (r *registry) buckets() []bus.BucketSpec {
	var out []bus.BucketSpec
	for _, k := range r.kinds {
		if k.storage != nil && !k.storage.pipeline {
			out = append(out, k.storage.spec)
		}
	}
	return out
}

// NamespacedBuckets are the buckets of the namespaced kinds on the generic handlers: what the namespace
// controller empties when a namespace goes (pods, deleted through the store, left out).
func NamespacedBuckets() []string {
	var out []string
	for _, k := range builtinKinds() {
		if k.namespaced && k.storage != nil && !k.storage.pipeline {
			out = append(out, k.storage.spec.Name)
		}
	}
	return out
}
