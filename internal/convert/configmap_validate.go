package convert

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxConfigMapSize bounds the total size of a ConfigMap's values, as kube's MaxSecretSize does.
const MaxConfigMapSize = 1 << 20

// ValidateConfigMap validates a ConfigMap as kube-apiserver does: its metadata, every key of data and
// binaryData ([-._a-zA-Z0-9]+, at most 253 characters, not "." or ".."), no key in both, and the total size
// of the values at most MaxConfigMapSize.
func ValidateConfigMap(c *corev1.ConfigMap) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&c.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	size := 0
	for key, value := range c.Data {
		p := field.NewPath("data").Key(key)
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(p, key, msg))
		}
		if _, dup := c.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(p, key, "duplicate of key present in binaryData"))
		}
		size += len(value)
	}
	for key, value := range c.BinaryData {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(key), key, msg))
		}
		size += len(value)
	}
	if size > MaxConfigMapSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", MaxConfigMapSize))
	}
	return errs
}

// ValidateConfigMapUpdate validates an update: the new ConfigMap as a whole, name and uid unchanged, and
// an immutable ConfigMap's data, binaryData and immutable flag unchanged.
func ValidateConfigMapUpdate(c, old *corev1.ConfigMap) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	if old.Immutable != nil && *old.Immutable {
		const msg = "field is immutable when `immutable` is set"
		if c.Immutable == nil || !*c.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), msg))
		}
		if !reflect.DeepEqual(c.Data, old.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), msg))
		}
		if !reflect.DeepEqual(c.BinaryData, old.BinaryData) {
			errs = append(errs, field.Forbidden(field.NewPath("binaryData"), msg))
		}
	}
	return append(errs, ValidateConfigMap(c)...)
}
