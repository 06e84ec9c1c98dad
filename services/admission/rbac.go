package admission

import (
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
)

// The RBAC kinds (rbac.authorization.k8s.io/v1) are kept in KV buckets like configmaps and served by the
// generic handlers; the authorizer (authorizer.go) evaluates them from their watch caches. Defaulting
// and validation follow kube-apiserver's: names are path segments, a binding's roleRef is immutable.

var (
	roleKind = &kind{
		group: rbacv1.GroupName, version: "v1", kind: "Role", resource: "roles", singular: "role", namespaced: true,
		newObject: func() runtime.Object { return &rbacv1.Role{} },
		columns:   createdAtColumns,
		cells:     createdAtRow,
		storage: jsonStorage(bus.BucketSpec{Name: bus.BucketRoles, Description: "podbus roles", History: 4},
			func() runtime.Object { return &rbacv1.Role{} }),
		strategy: strategy{
			admit: (*Service).admitRBAC,
			validate: func(o runtime.Object) field.ErrorList {
				r := o.(*rbacv1.Role)
				return append(validateRBACMeta(&r.ObjectMeta, true), validateRules(r.Rules, true)...)
			},
		},
	}
	clusterRoleKind = &kind{
		group: rbacv1.GroupName, version: "v1", kind: "ClusterRole", resource: "clusterroles", singular: "clusterrole",
		newObject: func() runtime.Object { return &rbacv1.ClusterRole{} },
		columns:   createdAtColumns,
		cells:     createdAtRow,
		storage: jsonStorage(bus.BucketSpec{Name: bus.BucketClusterRoles, Description: "podbus clusterroles", History: 4},
			func() runtime.Object { return &rbacv1.ClusterRole{} }),
		strategy: strategy{
			admit:    (*Service).admitRBAC,
			validate: func(o runtime.Object) field.ErrorList { return validateClusterRole(o.(*rbacv1.ClusterRole)) },
		},
	}
	roleBindingKind = &kind{
		group: rbacv1.GroupName, version: "v1", kind: "RoleBinding", resource: "rolebindings", singular: "rolebinding", namespaced: true,
		newObject: func() runtime.Object { return &rbacv1.RoleBinding{} },
		columns:   bindingColumns("roleBinding", "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This field is immutable."),
		cells: func(o runtime.Object) []any {
			b := o.(*rbacv1.RoleBinding)
			return bindingRow(b.ObjectMeta, b.RoleRef, b.Subjects)
		},
		storage: jsonStorage(bus.BucketSpec{Name: bus.BucketRoleBindings, Description: "podbus rolebindings", History: 4},
			func() runtime.Object { return &rbacv1.RoleBinding{} }),
		strategy: strategy{
			admit:            (*Service).admitRBAC,
			prepareForCreate: func(o runtime.Object) { b := o.(*rbacv1.RoleBinding); defaultBinding(&b.RoleRef, b.Subjects) },
			prepareForUpdate: func(o, _ runtime.Object, _ string) {
				b := o.(*rbacv1.RoleBinding)
				defaultBinding(&b.RoleRef, b.Subjects)
			},
			validate: func(o runtime.Object) field.ErrorList {
				b := o.(*rbacv1.RoleBinding)
				return validateBinding(&b.ObjectMeta, b.RoleRef, b.Subjects, true)
			},
			validateUpdate: func(o, old runtime.Object) field.ErrorList {
				b, ob := o.(*rbacv1.RoleBinding), old.(*rbacv1.RoleBinding)
				return validateBindingUpdate(&b.ObjectMeta, &ob.ObjectMeta, b.RoleRef, ob.RoleRef, b.Subjects, true)
			},
		},
	}
	clusterRoleBindingKind = &kind{
		group: rbacv1.GroupName, version: "v1", kind: "ClusterRoleBinding", resource: "clusterrolebindings", singular: "clusterrolebinding",
		newObject: func() runtime.Object { return &rbacv1.ClusterRoleBinding{} },
		columns:   bindingColumns("clusterRoleBinding", "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This field is immutable."),
		cells: func(o runtime.Object) []any {
			b := o.(*rbacv1.ClusterRoleBinding)
			return bindingRow(b.ObjectMeta, b.RoleRef, b.Subjects)
		},
		storage: jsonStorage(bus.BucketSpec{Name: bus.BucketClusterRoleBindings, Description: "podbus clusterrolebindings", History: 4},
			func() runtime.Object { return &rbacv1.ClusterRoleBinding{} }),
		strategy: strategy{
			admit:            (*Service).admitRBAC,
			prepareForCreate: func(o runtime.Object) { b := o.(*rbacv1.ClusterRoleBinding); defaultBinding(&b.RoleRef, b.Subjects) },
			prepareForUpdate: func(o, _ runtime.Object, _ string) {
				b := o.(*rbacv1.ClusterRoleBinding)
				defaultBinding(&b.RoleRef, b.Subjects)
			},
			validate: func(o runtime.Object) field.ErrorList {
				b := o.(*rbacv1.ClusterRoleBinding)
				return validateBinding(&b.ObjectMeta, b.RoleRef, b.Subjects, false)
			},
			validateUpdate: func(o, old runtime.Object) field.ErrorList {
				b, ob := o.(*rbacv1.ClusterRoleBinding), old.(*rbacv1.ClusterRoleBinding)
				return validateBindingUpdate(&b.ObjectMeta, &ob.ObjectMeta, b.RoleRef, ob.RoleRef, b.Subjects, false)
			},
		},
	}
)

// createdAtColumns print roles as kube-apiserver's default table does (NAME, CREATED AT).
var createdAtColumns = []metav1.TableColumnDefinition{
	col("Name", "string", "Name must be unique within a namespace.", 0),
	col("Created At", "date", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
}

func createdAtRow(o runtime.Object) []any {
	m := objectMeta(o)
	return []any{m.Name, m.CreationTimestamp.UTC().Format(time.RFC3339)}
}

func bindingColumns(what, roleRef string) []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		col("Name", "string", "Name must be unique within a namespace.", 0),
		col("Role", "string", roleRef, 0),
		col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
		col("Users", "string", "Users in the "+what, 1),
		col("Groups", "string", "Groups in the "+what, 1),
		col("ServiceAccounts", "string", "ServiceAccounts in the "+what, 1),
	}
}

func bindingRow(m metav1.ObjectMeta, ref rbacv1.RoleRef, subjects []rbacv1.Subject) []any {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
	}
	return []any{m.Name, ref.Kind + "/" + ref.Name, since(m.CreationTimestamp),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}

// defaultBinding sets the API groups v1 defaults: the roleRef's and those of User and Group subjects.
func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		if s := &subjects[i]; s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

func validateRBACMeta(m *metav1.ObjectMeta, namespaced bool) field.ErrorList {
	return apivalidation.ValidateObjectMeta(m, namespaced, func(name string, _ bool) []string { return content.IsPathSegmentName(name) }, field.NewPath("metadata"))
}

func validateClusterRole(r *rbacv1.ClusterRole) field.ErrorList {
	errs := append(validateRBACMeta(&r.ObjectMeta, false), validateRules(r.Rules, false)...)
	if a := r.AggregationRule; a != nil {
		p := field.NewPath("aggregationRule", "clusterRoleSelectors")
		if len(a.ClusterRoleSelectors) == 0 {
			errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
		}
		for i := range a.ClusterRoleSelectors {
			errs = append(errs, metav1validation.ValidateLabelSelector(&a.ClusterRoleSelectors[i], metav1validation.LabelSelectorValidationOptions{}, p.Index(i))...)
		}
	}
	return errs
}

// validateRules checks policy rules as kube's ValidatePolicyRule: a rule is about resources or about
// non-resource URLs, never both, and a Role's rules are never about URLs.
func validateRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		p := field.NewPath("rules").Index(i)
		if len(r.Verbs) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(r.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(r.APIGroups) > 0 || len(r.Resources) > 0 || len(r.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), r.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(r.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(r.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

func validateBinding(m *metav1.ObjectMeta, ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	errs := validateRBACMeta(m, namespaced)
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(field.NewPath("roleRef", "apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !slices.Contains(kinds, ref.Kind) {
		errs = append(errs, field.NotSupported(field.NewPath("roleRef", "kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(field.NewPath("roleRef", "name"), ""))
	} else {
		for _, msg := range content.IsPathSegmentName(ref.Name) {
			errs = append(errs, field.Invalid(field.NewPath("roleRef", "name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		p := field.NewPath("subjects").Index(i)
		if s.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.APIGroup != "" {
				errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if !namespaced && s.Namespace == "" {
				errs = append(errs, field.Required(p.Child("namespace"), ""))
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if s.APIGroup != rbacv1.GroupName {
				errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
		}
	}
	return errs
}

// validateBindingUpdate adds to a binding's validation that its roleRef never changes: a binding to
// another role is a new binding, which the escalation check sees whole.
func validateBindingUpdate(m, om *metav1.ObjectMeta, ref, oldRef rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	errs := validateBinding(m, ref, subjects, namespaced)
	errs = append(errs, apivalidation.ValidateObjectMetaUpdate(m, om, field.NewPath("metadata"))...)
	return append(errs, apivalidation.ValidateImmutableField(ref, oldRef, field.NewPath("roleRef"))...)
}
