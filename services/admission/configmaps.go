package admission

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
)

// ConfigMaps are stored as they are and read by nobody in podbus yet: a kind on the generic handlers
// with its validation alone.
var configMapKind = &kind{
	version: "v1", kind: "ConfigMap", resource: "configmaps", singular: "configmap", namespaced: true,
	shortNames: []string{"cm"},
	newObject:  func() runtime.Object { return &corev1.ConfigMap{} },
	columns: []metav1.TableColumnDefinition{
		col("Name", "string", "Name must be unique within a namespace.", 0),
		col("Data", "integer", "Data contains the configuration data.", 0),
		col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
	},
	cells: func(o runtime.Object) []any {
		c := o.(*corev1.ConfigMap)
		return []any{c.Name, int64(len(c.Data) + len(c.BinaryData)), since(c.CreationTimestamp)}
	},
	storage: jsonStorage(bus.BucketSpec{Name: bus.BucketConfigMaps, Description: "podbus configmaps", History: 4},
		func() runtime.Object { return &corev1.ConfigMap{} }),
	strategy: strategy{
		validate: func(o runtime.Object) field.ErrorList { return convert.ValidateConfigMap(o.(*corev1.ConfigMap)) },
		validateUpdate: func(o, old runtime.Object) field.ErrorList {
			return convert.ValidateConfigMapUpdate(o.(*corev1.ConfigMap), old.(*corev1.ConfigMap))
		},
	},
}
