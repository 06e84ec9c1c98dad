package admission

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// apps/v1 ReplicaSets and Deployments: kinds on the generic handlers, kept in their own buckets with
// their pod template converted beside them (internal/workload), for the workload controllers
// (services/workloads) that own their status and their pods. The API defaults and validates them as
// kube's apps strategies do, and serves their status and scale subresources.

func appsSubresources(kind string) []subresourceInfo {
	return []subresourceInfo{
		{name: "status", kind: kind, verbs: []string{"get", "patch", "update"}},
		{name: "scale", kind: "Scale", group: "autoscaling", verbs: []string{"get", "patch", "update"}},
	}
}

func appsColumns(first ...metav1.TableColumnDefinition) []metav1.TableColumnDefinition {
	cols := append([]metav1.TableColumnDefinition{col("Name", "string", "Name must be unique within a namespace.", 0)}, first...)
	return append(cols,
		col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
		col("Containers", "string", "Names of each container in the template.", 1),
		col("Images", "string", "Images referenced by each container in the template.", 1),
		col("Selector", "string", "Label selector for pods.", 1),
	)
}

func templateCells(t *corev1.PodTemplateSpec, sel *metav1.LabelSelector) []any {
	var names, images []string
	for _, c := range t.Spec.Containers {
		names = append(names, c.Name)
		images = append(images, c.Image)
	}
	return []any{strings.Join(names, ","), strings.Join(images, ","), metav1.FormatLabelSelector(sel)}
}

var replicaSetKind = &kind{
	group: "apps", version: "v1", kind: "ReplicaSet", resource: "replicasets", singular: "replicaset", namespaced: true,
	shortNames: []string{"rs"}, categories: []string{"all"},
	newObject: func() runtime.Object { return &appsv1.ReplicaSet{} },
	columns: appsColumns(
		col("Desired", "integer", "Replicas is the number of desired replicas.", 0),
		col("Current", "integer", "Replicas is the most recently observed number of replicas.", 0),
		col("Ready", "integer", "The number of ready replicas for this replica set.", 0),
	),
	cells: func(o runtime.Object) []any {
		rs := o.(*appsv1.ReplicaSet)
		cells := []any{rs.Name, int64(ptrOr(rs.Spec.Replicas, 1)), int64(rs.Status.Replicas), int64(rs.Status.ReadyReplicas), since(rs.CreationTimestamp)}
		return append(cells, templateCells(&rs.Spec.Template, rs.Spec.Selector)...)
	},
	subresources: appsSubresources("ReplicaSet"),
	storage: appsStorage(bus.BucketReplicaSets, func() runtime.Object { return &appsv1.ReplicaSet{} },
		func(o runtime.Object) *corev1.PodTemplateSpec { return &o.(*appsv1.ReplicaSet).Spec.Template }),
	strategy: strategy{
		prepareForCreate: func(o runtime.Object) {
			rs := o.(*appsv1.ReplicaSet)
			defaultReplicas(&rs.Spec.Replicas)
			defaultTemplate(&rs.Spec.Template, rs.Namespace)
			rs.Generation, rs.Status = 1, appsv1.ReplicaSetStatus{}
		},
		prepareForUpdate: func(o, old runtime.Object, sub string) {
			rs, ors := o.(*appsv1.ReplicaSet), old.(*appsv1.ReplicaSet)
			if sub == "status" {
				rs.ObjectMeta, rs.Spec = ors.ObjectMeta, ors.Spec
				return
			}
			rs.Status = ors.Status
			defaultReplicas(&rs.Spec.Replicas)
			defaultTemplate(&rs.Spec.Template, rs.Namespace)
			if !equality.Semantic.DeepEqual(rs.Spec, ors.Spec) {
				rs.Generation = ors.Generation + 1
			}
		},
		validate: func(o runtime.Object) field.ErrorList {
			rs := o.(*appsv1.ReplicaSet)
			errs := apivalidation.ValidateObjectMeta(&rs.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
			return append(errs, validatePodSet(rs.Spec.Replicas, rs.Spec.Selector, &rs.Spec.Template, rs.Spec.MinReadySeconds, rs.Namespace)...)
		},
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			rs, ors := o.(*appsv1.ReplicaSet), old.(*appsv1.ReplicaSet)
			errs := apivalidation.ValidateObjectMetaUpdate(&rs.ObjectMeta, &ors.ObjectMeta, field.NewPath("metadata"))
			errs = append(errs, validatePodSet(rs.Spec.Replicas, rs.Spec.Selector, &rs.Spec.Template, rs.Spec.MinReadySeconds, rs.Namespace)...)
			return append(errs, validateSelectorImmutable(rs.Spec.Selector, ors.Spec.Selector)...)
		},
	},
}

var deploymentKind = &kind{
	group: "apps", version: "v1", kind: "Deployment", resource: "deployments", singular: "deployment", namespaced: true,
	shortNames: []string{"deploy"}, categories: []string{"all"},
	newObject: func() runtime.Object { return &appsv1.Deployment{} },
	columns: appsColumns(
		col("Ready", "string", "Number of the pod with ready state", 0),
		col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0),
		col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0),
	),
	cells: func(o runtime.Object) []any {
		d := o.(*appsv1.Deployment)
		cells := []any{d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, ptrOr(d.Spec.Replicas, 1)),
			int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas), since(d.CreationTimestamp)}
		return append(cells, templateCells(&d.Spec.Template, d.Spec.Selector)...)
	},
	subresources: appsSubresources("Deployment"),
	storage: appsStorage(bus.BucketDeployments, func() runtime.Object { return &appsv1.Deployment{} },
		func(o runtime.Object) *corev1.PodTemplateSpec { return &o.(*appsv1.Deployment).Spec.Template }),
	strategy: strategy{
		prepareForCreate: func(o runtime.Object) {
			d := o.(*appsv1.Deployment)
			defaultDeployment(d)
			d.Generation, d.Status = 1, appsv1.DeploymentStatus{}
		},
		prepareForUpdate: func(o, old runtime.Object, sub string) {
			d, od := o.(*appsv1.Deployment), old.(*appsv1.Deployment)
			if sub == "status" {
				d.ObjectMeta, d.Spec = od.ObjectMeta, od.Spec
				return
			}
			d.Status = od.Status
			defaultDeployment(d)
			if !equality.Semantic.DeepEqual(d.Spec, od.Spec) {
				d.Generation = od.Generation + 1
			}
		},
		validate: func(o runtime.Object) field.ErrorList {
			d := o.(*appsv1.Deployment)
			errs := apivalidation.ValidateObjectMeta(&d.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
			return append(errs, validateDeploymentSpec(&d.Spec, d.Namespace)...)
		},
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			d, od := o.(*appsv1.Deployment), old.(*appsv1.Deployment)
			errs := apivalidation.ValidateObjectMetaUpdate(&d.ObjectMeta, &od.ObjectMeta, field.NewPath("metadata"))
			errs = append(errs, validateDeploymentSpec(&d.Spec, d.Namespace)...)
			return append(errs, validateSelectorImmutable(d.Spec.Selector, od.Spec.Selector)...)
		},
	},
}

// appsStorage keeps an apps object as its JSON and its template converted to the pipeline's pod (the
// pod each controller creates, metadata aside), defaulted as the API defaults pods.
func appsStorage(bucket string, newObject func() runtime.Object, template func(runtime.Object) *corev1.PodTemplateSpec) *kvStorage {
	return &kvStorage{
		spec: bus.BucketSpec{Name: bucket, Description: "podbus " + bucket, History: 4},
		encode: func(o runtime.Object) ([]byte, error) {
			return workload.Encode(o, templatePod(template(o), objectMeta(o).Namespace))
		},
		decode: func(data []byte) (runtime.Object, error) {
			o := newObject()
			if _, err := workload.Decode(data, o); err != nil {
				return nil, err
			}
			return o, nil
		},
	}
}

// templatePod is the pipeline's pod a template makes: defaulted, with the status a new pod starts with.
func templatePod(t *corev1.PodTemplateSpec, ns string) *pb.Pod {
	pod := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
	pod.Namespace = ns
	convert.DefaultPod(pod)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: convert.QOSClass(pod)}
	p, _ := convert.PodToPB(pod)
	return p
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func defaultReplicas(r **int32) {
	if *r == nil {
		v := int32(1)
		*r = &v
	}
}

// defaultTemplate applies the pod defaults to a template, as kube's apps defaulting does; the default
// tolerations are a pod admission's, not the template's.
func defaultTemplate(t *corev1.PodTemplateSpec, ns string) {
	pod := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	pod.Namespace = ns
	tolerations := t.Spec.Tolerations
	convert.DefaultPod(pod)
	pod.Spec.Tolerations = tolerations
	t.Spec = pod.Spec
}

func defaultDeployment(d *appsv1.Deployment) {
	defaultReplicas(&d.Spec.Replicas)
	defaultTemplate(&d.Spec.Template, d.Namespace)
	s := &d.Spec.Strategy
	if s.Type == "" {
		s.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if s.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if s.RollingUpdate == nil {
			s.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		if s.RollingUpdate.MaxUnavailable == nil {
			v := intstr.FromString("25%")
			s.RollingUpdate.MaxUnavailable = &v
		}
		if s.RollingUpdate.MaxSurge == nil {
			v := intstr.FromString("25%")
			s.RollingUpdate.MaxSurge = &v
		}
	}
	if d.Spec.RevisionHistoryLimit == nil {
		v := int32(10)
		d.Spec.RevisionHistoryLimit = &v
	}
	if d.Spec.ProgressDeadlineSeconds == nil {
		v := int32(600)
		d.Spec.ProgressDeadlineSeconds = &v
	}
}

// validatePodSet checks what ReplicaSets and Deployments share: replicas, a selector that selects the
// template, and the template as a pod.
func validatePodSet(replicas *int32, sel *metav1.LabelSelector, t *corev1.PodTemplateSpec, minReady int32, ns string) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if replicas != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*replicas), spec.Child("replicas"))...)
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(minReady), spec.Child("minReadySeconds"))...)
	if sel == nil {
		errs = append(errs, field.Required(spec.Child("selector"), ""))
	} else {
		errs = append(errs, metavalidation.ValidateLabelSelector(sel, metavalidation.LabelSelectorValidationOptions{}, spec.Child("selector"))...)
		if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
			errs = append(errs, field.Invalid(spec.Child("selector"), sel, "empty selector is invalid for deployment"))
		}
	}
	if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && sel != nil && !s.Empty() && !s.Matches(labels.Set(t.Labels)) {
		errs = append(errs, field.Invalid(spec.Child("template", "metadata", "labels"), t.Labels, "`selector` does not match template `labels`"))
	}
	if t.Spec.RestartPolicy != "" && t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(spec.Child("template", "spec", "restartPolicy"), t.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)}))
	}
	// The template is checked as the pod it makes; the pod's own name is the controller's to choose.
	pod := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
	pod.Name, pod.Namespace = "template", ns
	convert.DefaultPod(pod)
	for _, e := range convert.ValidatePod(pod) {
		e.Field = "spec.template." + e.Field
		errs = append(errs, e)
	}
	return errs
}

func validateSelectorImmutable(sel, old *metav1.LabelSelector) field.ErrorList {
	if equality.Semantic.DeepEqual(sel, old) {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("spec", "selector"), sel, "field is immutable")}
}

func validateDeploymentSpec(s *appsv1.DeploymentSpec, ns string) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validatePodSet(s.Replicas, s.Selector, &s.Template, s.MinReadySeconds, ns)
	st := spec.Child("strategy")
	switch s.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if s.Strategy.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(st.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		if ru := s.Strategy.RollingUpdate; ru != nil {
			p := st.Child("rollingUpdate")
			errs = append(errs, validateIntOrPercent(ru.MaxUnavailable, p.Child("maxUnavailable"), true)...)
			errs = append(errs, validateIntOrPercent(ru.MaxSurge, p.Child("maxSurge"), false)...)
			if isZero(ru.MaxUnavailable) && isZero(ru.MaxSurge) {
				errs = append(errs, field.Invalid(p.Child("maxUnavailable"), ru.MaxUnavailable, "may not be 0 when `maxSurge` is 0"))
			}
		}
	default:
		errs = append(errs, field.NotSupported(st.Child("type"), s.Strategy.Type,
			[]string{string(appsv1.RecreateDeploymentStrategyType), string(appsv1.RollingUpdateDeploymentStrategyType)}))
	}
	if s.RevisionHistoryLimit != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*s.RevisionHistoryLimit), spec.Child("revisionHistoryLimit"))...)
	}
	if pd := s.ProgressDeadlineSeconds; pd != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*pd), spec.Child("progressDeadlineSeconds"))...)
		if *pd <= s.MinReadySeconds {
			errs = append(errs, field.Invalid(spec.Child("progressDeadlineSeconds"), *pd, "must be greater than minReadySeconds"))
		}
	}
	return errs
}

func isZero(v *intstr.IntOrString) bool {
	if v == nil {
		return false
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true)
	return err == nil && n == 0
}

func validateIntOrPercent(v *intstr.IntOrString, p *field.Path, atMost100 bool) field.ErrorList {
	if v == nil {
		return nil
	}
	switch v.Type {
	case intstr.Int:
		if v.IntVal < 0 {
			return field.ErrorList{field.Invalid(p, v.IntVal, "must be greater than or equal to 0")}
		}
	case intstr.String:
		s, ok := strings.CutSuffix(v.StrVal, "%")
		n, err := strconv.Atoi(s)
		if !ok || err != nil {
			return field.ErrorList{field.Invalid(p, v.StrVal, "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")}
		}
		if n < 0 {
			return field.ErrorList{field.Invalid(p, v.StrVal, "must be greater than or equal to 0")}
		}
		if atMost100 && n > 100 {
			return field.ErrorList{field.Invalid(p, v.StrVal, "must not be greater than 100%")}
		}
	}
	return nil
}

// scaleOf is the autoscaling/v1 Scale of a ReplicaSet or Deployment.
func scaleOf(o runtime.Object) *autoscalingv1.Scale {
	m := objectMeta(o)
	sc := &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{Kind: "Scale", APIVersion: "autoscaling/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID,
			ResourceVersion: m.ResourceVersion, CreationTimestamp: m.CreationTimestamp},
	}
	var sel *metav1.LabelSelector
	switch x := o.(type) {
	case *appsv1.Deployment:
		sc.Spec.Replicas, sc.Status.Replicas, sel = ptrOr(x.Spec.Replicas, 1), x.Status.Replicas, x.Spec.Selector
	case *appsv1.ReplicaSet:
		sc.Spec.Replicas, sc.Status.Replicas, sel = ptrOr(x.Spec.Replicas, 1), x.Status.Replicas, x.Spec.Selector
	}
	if s, err := metav1.LabelSelectorAsSelector(sel); err == nil {
		sc.Status.Selector = s.String()
	}
	return sc
}

func setReplicas(o runtime.Object, n int32) *int32 {
	switch x := o.(type) {
	case *appsv1.Deployment:
		x.Spec.Replicas = &n
	case *appsv1.ReplicaSet:
		x.Spec.Replicas = &n
	}
	return &n
}

// serveScale serves the scale subresource (kubectl scale): get, update or patch spec.replicas through
// an autoscaling/v1 Scale, written back to the object by compare-and-set.
func (s *Service) serveScale(w http.ResponseWriter, r *http.Request, req request) {
	k := req.kind
	if r.Method == http.MethodGet {
		o, _, err := s.getEntry(r.Context(), k, req.ns, req.name)
		if err != nil {
			writeStatus(w, err)
			return
		}
		writeJSON(w, http.StatusOK, scaleOf(o))
		return
	}
	mode, err := fieldValidation(r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	apply, precondition, err := s.updateRequest(w, r, mode, k, autoscalingv1.Scale{})
	if err != nil {
		writeStatus(w, err)
		return
	}
	out, err := retryConflicts(k, req.name, precondition, "admission.update.retries", func() (*autoscalingv1.Scale, error) {
		return s.scaleOnce(r, req, apply)
	})
	if err != nil {
		writeStatus(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) scaleOnce(r *http.Request, req request, apply func([]byte) ([]byte, error)) (*autoscalingv1.Scale, error) {
	k := req.kind
	o, rev, err := s.getEntry(r.Context(), k, req.ns, req.name)
	if err != nil {
		return nil, err
	}
	cur := scaleOf(o)
	data, err := json.Marshal(cur)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if data, err = apply(data); err != nil {
		return nil, err
	}
	want := &autoscalingv1.Scale{}
	if err := json.Unmarshal(data, want); err != nil {
		return nil, badRequest("invalid Scale: %v", err)
	}
	if want.ResourceVersion != "" && want.ResourceVersion != cur.ResourceVersion {
		return nil, bus.ErrConflict
	}
	if want.Spec.Replicas < 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "autoscaling", Kind: "Scale"}, req.name, field.ErrorList{
			field.Invalid(field.NewPath("spec", "replicas"), want.Spec.Replicas, "must be greater than or equal to 0")})
	}
	if want.Spec.Replicas == cur.Spec.Replicas || dryRun(req) {
		cur.Spec.Replicas = want.Spec.Replicas
		return cur, nil
	}
	setReplicas(o, want.Spec.Replicas)
	objectMeta(o).Generation++
	newRev, err := s.writeObject(r.Context(), k, o, rev)
	if err != nil {
		return nil, err
	}
	k.stamp(o, newRev)
	return scaleOf(o), nil
}
