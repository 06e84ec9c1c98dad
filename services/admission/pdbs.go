package admission

import (
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
)

// PodDisruptionBudgets are kept by the generic handlers; the disruption controller (services/controllers)
// writes their status, and the eviction subresource (eviction.go) spends their disruptionsAllowed.
var pdbKind = &kind{
	group: "policy", version: "v1", kind: "PodDisruptionBudget", resource: "poddisruptionbudgets",
	singular: "poddisruptionbudget", namespaced: true, shortNames: []string{"pdb"},
	newObject: func() runtime.Object { return &policyv1.PodDisruptionBudget{} },
	columns: []metav1.TableColumnDefinition{
		col("Name", "string", "Name must be unique within a namespace.", 0),
		col("Min Available", "string", "The minimum number of pods that must be available simultaneously. This can be either an integer or a string specifying a percentage, e.g. \"28%\".", 0),
		col("Max Unavailable", "string", "The maximum number of pods that may be unavailable simultaneously. This can be either an integer or a string specifying a percentage, e.g. \"28%\".", 0),
		col("Allowed Disruptions", "integer", "Number of pod disruptions that are currently allowed.", 0),
		col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
	},
	cells: func(o runtime.Object) []any {
		p := o.(*policyv1.PodDisruptionBudget)
		return []any{p.Name, intOrPercentCell(p.Spec.MinAvailable), intOrPercentCell(p.Spec.MaxUnavailable),
			int64(p.Status.DisruptionsAllowed), since(p.CreationTimestamp)}
	},
	storage: jsonStorage(bus.BucketSpec{Name: bus.BucketPDBs, Description: "podbus poddisruptionbudgets", History: 4},
		func() runtime.Object { return &policyv1.PodDisruptionBudget{} }),
	subresources: []subresourceInfo{{name: "status", kind: "PodDisruptionBudget", verbs: []string{"get", "patch", "update"}}},
	strategy: strategy{
		prepareForCreate: func(o runtime.Object) {
			p := o.(*policyv1.PodDisruptionBudget)
			p.Generation = 1
			p.Status = policyv1.PodDisruptionBudgetStatus{}
		},
		validate: func(o runtime.Object) field.ErrorList { return validatePDB(o.(*policyv1.PodDisruptionBudget)) },
		prepareForUpdate: func(o, old runtime.Object, sub string) {
			p, op := o.(*policyv1.PodDisruptionBudget), old.(*policyv1.PodDisruptionBudget)
			if sub == "status" {
				p.Spec, p.Labels, p.Annotations, p.Finalizers, p.OwnerReferences = op.Spec, op.Labels, op.Annotations, op.Finalizers, op.OwnerReferences
				return
			}
			p.Status = op.Status
			if !apiequality.Semantic.DeepEqual(p.Spec, op.Spec) {
				p.Generation = op.Generation + 1
			}
		},
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			p, op := o.(*policyv1.PodDisruptionBudget), old.(*policyv1.PodDisruptionBudget)
			errs := apivalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &op.ObjectMeta, field.NewPath("metadata"))
			return append(errs, validatePDB(p)...)
		},
	},
}

// validatePDB is policy's validation: one of minAvailable and maxUnavailable, each a count or a
// percentage, and a valid selector (policy/v1: an empty one selects every pod of the namespace).
func validatePDB(p *policyv1.PodDisruptionBudget) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&p.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	if p.Spec.MinAvailable != nil && p.Spec.MaxUnavailable != nil {
		errs = append(errs, field.Invalid(spec, p.Spec, "minAvailable and maxUnavailable cannot be both set"))
	}
	errs = append(errs, validateIntOrPercent(p.Spec.MinAvailable, spec.Child("minAvailable"), true)...)
	errs = append(errs, validateIntOrPercent(p.Spec.MaxUnavailable, spec.Child("maxUnavailable"), true)...)
	if p.Spec.Selector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(p.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, spec.Child("selector"))...)
	}
	if pol := p.Spec.UnhealthyPodEvictionPolicy; pol != nil && *pol != policyv1.IfHealthyBudget && *pol != policyv1.AlwaysAllow {
		errs = append(errs, field.NotSupported(spec.Child("unhealthyPodEvictionPolicy"), *pol, []string{string(policyv1.IfHealthyBudget), string(policyv1.AlwaysAllow)}))
	}
	return errs
}

func intOrPercentCell(v *intstr.IntOrString) string {
	if v == nil {
		return "N/A"
	}
	return v.String()
}
