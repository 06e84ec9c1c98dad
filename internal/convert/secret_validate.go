package convert

import (
	"encoding/json"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxSecretSize bounds the total size of a Secret's values, as kube's does.
const MaxSecretSize = 1 << 20

// MergeStringData moves a Secret's write-only stringData into data (its values win), as kube's
// conversion does: stringData is never stored nor shown.
func MergeStringData(s *corev1.Secret) {
	if len(s.StringData) == 0 {
		s.StringData = nil
		return
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

// DefaultSecret sets an absent type to Opaque.
func DefaultSecret(s *corev1.Secret) {
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
}

// ValidateSecret validates a Secret as kube-apiserver does: metadata, keys, total size, and the keys each
// well-known type requires (tls.crt and tls.key, .dockerconfigjson holding JSON, ...).
func ValidateSecret(s *corev1.Secret) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	dataPath := field.NewPath("data")
	size := 0
	for key, value := range s.Data {
		for _, msg := range validation.IsConfigMapKey(key) {
			errs = append(errs, field.Invalid(dataPath.Key(key), key, msg))
		}
		size += len(value)
	}
	if size > MaxSecretSize {
		errs = append(errs, field.TooLong(dataPath, "", MaxSecretSize))
	}
	required := func(keys ...string) {
		for _, k := range keys {
			if _, ok := s.Data[k]; !ok {
				errs = append(errs, field.Required(dataPath.Key(k), ""))
			}
		}
	}
	jsonIn := func(key string) {
		if v, ok := s.Data[key]; ok && !json.Valid(v) {
			errs = append(errs, field.Invalid(dataPath.Key(key), "<secret contents redacted>", "invalid JSON"))
		}
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			errs = append(errs, field.Required(field.NewPath("metadata", "annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg:
		required(corev1.DockerConfigKey)
		jsonIn(corev1.DockerConfigKey)
	case corev1.SecretTypeDockerConfigJson:
		required(corev1.DockerConfigJsonKey)
		jsonIn(corev1.DockerConfigJsonKey)
	case corev1.SecretTypeBasicAuth:
		_, u := s.Data[corev1.BasicAuthUsernameKey]
		_, p := s.Data[corev1.BasicAuthPasswordKey]
		if !u && !p {
			errs = append(errs, field.Required(dataPath.Key(corev1.BasicAuthUsernameKey), ""),
				field.Required(dataPath.Key(corev1.BasicAuthPasswordKey), ""))
		}
	case corev1.SecretTypeSSHAuth:
		required(corev1.SSHAuthPrivateKey)
	case corev1.SecretTypeTLS:
		required(corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	default:
		for _, msg := range validation.IsQualifiedName(string(s.Type)) {
			errs = append(errs, field.Invalid(field.NewPath("type"), s.Type, msg))
		}
	}
	return errs
}

// ValidateSecretUpdate validates an update: the new Secret as a whole, its type unchanged, and an
// immutable Secret's data and immutable flag unchanged.
func ValidateSecretUpdate(s, old *corev1.Secret) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaUpdate(&s.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	if s.Type != old.Type {
		errs = append(errs, field.Invalid(field.NewPath("type"), s.Type, "field is immutable"))
	}
	if old.Immutable != nil && *old.Immutable {
		const msg = "field is immutable when `immutable` is set"
		if s.Immutable == nil || !*s.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), msg))
		}
		if !reflect.DeepEqual(s.Data, old.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), msg))
		}
	}
	return append(errs, ValidateSecret(s)...)
}
