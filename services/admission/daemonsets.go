package admission

import (
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
)

// DaemonSets are kept in their bucket by the generic handlers; the controllers service
// (services/controllers) runs their pods and writes their status subresource.
var daemonSetKind = &kind{
	group: "apps", version: "v1", kind: "DaemonSet", resource: "daemonsets", singular: "daemonset", namespaced: true,
	shortNames: []string{"ds"}, categories: []string{"all"},
	newObject: func() runtime.Object { return &appsv1.DaemonSet{} },
	columns: []metav1.TableColumnDefinition{
		col("Name", "string", "Name must be unique within a namespace.", 0),
		col("Desired", "integer", "The total number of nodes that should be running the daemon pod.", 0),
		col("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.", 0),
		col("Ready", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.", 0),
		col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod", 0),
		col("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)", 0),
		col("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node.", 0),
		col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
		col("Containers", "string", "Names of each container in the template.", 1),
		col("Images", "string", "Images referenced by each container in the template.", 1),
		col("Selector", "string", "A label query over pods that are managed by the daemon set.", 1),
	},
	cells: func(o runtime.Object) []any {
		d := o.(*appsv1.DaemonSet)
		names, images := containerCells(d.Spec.Template.Spec.Containers)
		sel := "<none>"
		if s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil && !s.Empty() {
			sel = s.String()
		}
		return []any{d.Name, int64(d.Status.DesiredNumberScheduled), int64(d.Status.CurrentNumberScheduled),
			int64(d.Status.NumberReady), int64(d.Status.UpdatedNumberScheduled), int64(d.Status.NumberAvailable),
			nodeSelectorCell(d.Spec.Template.Spec.NodeSelector), since(d.CreationTimestamp), names, images, sel}
	},
	storage: jsonStorage(bus.BucketSpec{Name: bus.BucketDaemonSets, Description: "podbus daemonsets", History: 4},
		func() runtime.Object { return &appsv1.DaemonSet{} }),
	subresources: []subresourceInfo{{name: "status", kind: "DaemonSet", verbs: []string{"get", "patch", "update"}}},
	strategy: strategy{
		prepareForCreate: func(o runtime.Object) {
			d := o.(*appsv1.DaemonSet)
			d.Generation = 1
			d.Status = appsv1.DaemonSetStatus{}
			defaultDaemonSet(d)
		},
		validate: func(o runtime.Object) field.ErrorList { return validateDaemonSet(o.(*appsv1.DaemonSet)) },
		prepareForUpdate: func(o, old runtime.Object, sub string) {
			d, od := o.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
			if sub == "status" {
				d.Spec, d.Labels, d.Annotations, d.Finalizers, d.OwnerReferences = od.Spec, od.Labels, od.Annotations, od.Finalizers, od.OwnerReferences
				return
			}
			d.Status = od.Status
			defaultDaemonSet(d)
			if !apiequality.Semantic.DeepEqual(d.Spec, od.Spec) {
				d.Generation = od.Generation + 1
			}
		},
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			d, od := o.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
			errs := apivalidation.ValidateObjectMetaUpdate(&d.ObjectMeta, &od.ObjectMeta, field.NewPath("metadata"))
			if !apiequality.Semantic.DeepEqual(d.Spec.Selector, od.Spec.Selector) {
				errs = append(errs, field.Invalid(field.NewPath("spec", "selector"), d.Spec.Selector, "field is immutable"))
			}
			return append(errs, validateDaemonSet(d)...)
		},
	},
}

// defaultDaemonSet applies apps/v1's defaults.
func defaultDaemonSet(d *appsv1.DaemonSet) {
	s := &d.Spec
	if s.UpdateStrategy.Type == "" {
		s.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if s.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if s.UpdateStrategy.RollingUpdate == nil {
			s.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		ru := s.UpdateStrategy.RollingUpdate
		if ru.MaxUnavailable == nil {
			one := intstr.FromInt32(1)
			ru.MaxUnavailable = &one
		}
		if ru.MaxSurge == nil {
			zero := intstr.FromInt32(0)
			ru.MaxSurge = &zero
		}
	}
	if s.RevisionHistoryLimit == nil {
		ten := int32(10)
		s.RevisionHistoryLimit = &ten
	}
	defaultTemplate(&s.Template, d.Namespace)
}

// validateDaemonSet is apps' validation of a DaemonSet: metadata, a selector matching the template's
// labels, the template as a pod, restartPolicy Always, and the update strategy.
func validateDaemonSet(d *appsv1.DaemonSet) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&d.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	errs = append(errs, validateSelectorTemplate(d.Spec.Selector, &d.Spec.Template, spec)...)
	switch d.Spec.UpdateStrategy.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
	case appsv1.RollingUpdateDaemonSetStrategyType:
		ru := d.Spec.UpdateStrategy.RollingUpdate
		p := spec.Child("updateStrategy", "rollingUpdate")
		if ru != nil {
			errs = append(errs, validateIntOrPercent(ru.MaxUnavailable, p.Child("maxUnavailable"), true)...)
			errs = append(errs, validateIntOrPercent(ru.MaxSurge, p.Child("maxSurge"), true)...)
			if isZero(ru.MaxUnavailable) && isZero(ru.MaxSurge) {
				errs = append(errs, field.Invalid(p.Child("maxUnavailable"), ru.MaxUnavailable.String(), "may not be 0 when maxSurge is 0"))
			}
		}
	default:
		errs = append(errs, field.NotSupported(spec.Child("updateStrategy", "type"), d.Spec.UpdateStrategy.Type,
			[]string{string(appsv1.OnDeleteDaemonSetStrategyType), string(appsv1.RollingUpdateDaemonSetStrategyType)}))
	}
	if d.Spec.MinReadySeconds < 0 {
		errs = append(errs, field.Invalid(spec.Child("minReadySeconds"), d.Spec.MinReadySeconds, "must be greater than or equal to 0"))
	}
	return errs
}

// validateSelectorTemplate checks a workload's selector and pod template, as apps' validation does.
func validateSelectorTemplate(sel *metav1.LabelSelector, t *corev1.PodTemplateSpec, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sel == nil {
		return append(errs, field.Required(spec.Child("selector"), ""))
	}
	errs = append(errs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, spec.Child("selector"))...)
	if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		errs = append(errs, field.Invalid(spec.Child("selector"), sel, "empty selector is invalid for daemonset"))
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err == nil && !s.Matches(labels.Set(t.Labels)) {
		errs = append(errs, field.Invalid(spec.Child("template", "metadata", "labels"), t.Labels, "`selector` does not match template `labels`"))
	}
	if t.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(spec.Child("template", "spec", "restartPolicy"), t.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)}))
	}
	// The template as the pod it becomes (a name stands in for the generated one).
	p := &corev1.Pod{ObjectMeta: *t.ObjectMeta.DeepCopy(), Spec: *t.Spec.DeepCopy()}
	p.Name, p.Namespace = "template", "default"
	for _, e := range convert.ValidatePod(p) {
		if strings.HasPrefix(e.Field, "metadata.name") || strings.HasPrefix(e.Field, "metadata.namespace") {
			continue
		}
		e.Field = spec.Child("template").String() + "." + e.Field
		errs = append(errs, e)
	}
	return errs
}

// containerCells are the CONTAINERS and IMAGES cells of a pod template.
func containerCells(cs []corev1.Container) (string, string) {
	var names, images []string
	for _, c := range cs {
		names, images = append(names, c.Name), append(images, c.Image)
	}
	return strings.Join(names, ","), strings.Join(images, ",")
}

// nodeSelectorCell prints a node selector as kubectl does (key=value, sorted; <none>).
func nodeSelectorCell(m map[string]string) string {
	if len(m) == 0 {
		return "<none>"
	}
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
