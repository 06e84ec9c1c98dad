package convert

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateNode validates a node as kube-apiserver does for the fields podbus keeps: name, labels,
// annotations, taints (key, value, effect, unique by key and effect) and the resource lists.
func ValidateNode(n *corev1.Node) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&n.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, validateTaints(n.Spec.Taints, field.NewPath("spec", "taints"))...)
	for _, l := range []struct {
		name string
		list corev1.ResourceList
	}{{"capacity", n.Status.Capacity}, {"allocatable", n.Status.Allocatable}} {
		p := field.NewPath("status", l.name)
		for name, q := range l.list {
			for _, msg := range validation.IsQualifiedName(string(name)) {
				errs = append(errs, field.Invalid(p.Key(string(name)), name, msg))
			}
			errs = append(errs, validateQuantity(name, q, p.Key(string(name)))...)
		}
	}
	return errs
}

// ValidateNodeUpdate validates an update: the new node as a whole, and the name and uid unchanged.
func ValidateNodeUpdate(n, old *corev1.Node) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(errs, ValidateNode(n)...)
}

// validateTaints is kube-apiserver's validateNodeTaints.
func validateTaints(taints []corev1.Taint, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[corev1.TaintEffect]sets.Set[string]{}
	for i, t := range taints {
		idx := fldPath.Index(i)
		errs = append(errs, metav1validation.ValidateLabelName(t.Key, idx.Child("key"))...)
		if msgs := validation.IsValidLabelValue(t.Value); len(msgs) != 0 {
			errs = append(errs, field.Invalid(idx.Child("value"), t.Value, strings.Join(msgs, ";")))
		}
		errs = append(errs, enumField(idx, "effect", string(t.Effect), true,
			corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute)...)
		if seen[t.Effect].Has(t.Key) {
			dup := field.Duplicate(idx, t)
			dup.Detail = "taints must be unique by key and effect pair"
			errs = append(errs, dup)
			continue
		}
		if seen[t.Effect] == nil {
			seen[t.Effect] = sets.New[string]()
		}
		seen[t.Effect].Insert(t.Key)
	}
	return errs
}
