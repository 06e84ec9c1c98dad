package convert

import (
	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateNamespace validates a namespace as kube-apiserver does: a DNS label for a name, valid
// metadata, and qualified finalizer names.
func ValidateNamespace(n *corev1.Namespace) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&n.ObjectMeta, false, apivalidation.ValidateNamespaceName, field.NewPath("metadata"))
	for i, f := range n.Spec.Finalizers {
		for _, msg := range validation.IsQualifiedName(string(f)) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "finalizers").Index(i), f, msg))
		}
	}
	return errs
}

// ValidateNamespaceUpdate validates an update: the new namespace as a whole, name and uid unchanged.
func ValidateNamespaceUpdate(n, old *corev1.Namespace) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&n.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(errs, ValidateNamespace(n)...)
}
