package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	"github.com/podbus/podbus/internal/secretbox"
)

// Secrets are kept sealed in their bucket (secretbox: AES-GCM, the storage key as additional data) with
// the key of Config.EncryptionKeyFile, and decrypted only when served; the watch cache holds the sealed
// bytes. The bucket is not sourced into AUDIT, and no event names a Secret's data. Without a key file
// Secrets are stored in clear, as kube-apiserver without an EncryptionConfiguration stores them.
var secretKind = &kind{
	version: "v1", kind: "Secret", resource: "secrets", singular: "secret", namespaced: true,
	newObject: func() runtime.Object { return &corev1.Secret{} },
	columns: []metav1.TableColumnDefinition{
		col("Name", "string", "Name must be unique within a namespace.", 0),
		col("Type", "string", "Used to facilitate programmatic handling of secret data.", 0),
		col("Data", "string", "Data contains the secret data.", 0),
		col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
	},
	cells: func(o runtime.Object) []any {
		s := o.(*corev1.Secret)
		return []any{s.Name, string(s.Type), int64(len(s.Data)), since(s.CreationTimestamp)}
	},
	fields: func(o runtime.Object) fields.Set {
		s := o.(*corev1.Secret)
		return fields.Set{"metadata.name": s.Name, "metadata.namespace": s.Namespace, "type": string(s.Type)}
	},
	storage: secretStorage(nil),
	strategy: strategy{
		prepareForCreate: func(o runtime.Object) {
			s := o.(*corev1.Secret)
			convert.MergeStringData(s)
			convert.DefaultSecret(s)
		},
		prepareForUpdate: func(o, old runtime.Object, _ string) {
			s := o.(*corev1.Secret)
			convert.MergeStringData(s)
			convert.DefaultSecret(s)
		},
		validate: func(o runtime.Object) field.ErrorList { return convert.ValidateSecret(o.(*corev1.Secret)) },
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			return convert.ValidateSecretUpdate(o.(*corev1.Secret), old.(*corev1.Secret))
		},
	},
}

var secretsBucket = bus.BucketSpec{Name: bus.BucketSecrets, Description: "podbus secrets (sealed)", History: 4}

// secretStorage seals the Secret's JSON with box (nil: in clear).
func secretStorage(box *secretbox.Box) *kvStorage {
	return &kvStorage{
		spec: secretsBucket,
		encode: func(o runtime.Object) ([]byte, error) {
			s := o.DeepCopyObject().(*corev1.Secret)
			s.ResourceVersion, s.StringData = "", nil
			s.SetGroupVersionKind(schema.GroupVersionKind{})
			plain, err := json.Marshal(s)
			if err != nil {
				return nil, err
			}
			return box.Seal(bus.ObjectKey(s.Namespace, s.Name), plain)
		},
		// The additional data is the key the value was read from: a value moved under another key
		// does not open.
		decodeKey: func(key string, data []byte) (runtime.Object, error) {
			s, err := OpenSecret(box, key, data)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
	}
}

// withSecretBox is kinds with the Secret kind storing through box. Called once by New.
func withSecretBox(kinds []*kind, box *secretbox.Box) []*kind {
	out := slices.Clone(kinds)
	for i, k := range out {
		if k.resource != secretKind.resource || k.group != "" {
			continue
		}
		c := *k
		c.storage = secretStorage(box)
		out[i] = &c
	}
	return out
}

// OpenSecret decodes a stored Secret read under key.
func OpenSecret(box *secretbox.Box, key string, data []byte) (*corev1.Secret, error) {
	plain, err := box.Open(key, data)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", key, err)
	}
	s := &corev1.Secret{}
	if err := json.Unmarshal(plain, s); err != nil {
		return nil, errors.Join(bus.ErrMalformed, err)
	}
	return s, nil
}

// loadSecretBox reads the key file, creating it on first start ("": none, Secrets in clear).
func loadSecretBox(path string) (*secretbox.Box, error) {
	if path == "" {
		return nil, nil
	}
	box, err := secretbox.LoadOrCreate(path)
	if err != nil {
		return nil, fmt.Errorf("%w: encryption key: %v", ErrConfig, err)
	}
	return box, nil
}
