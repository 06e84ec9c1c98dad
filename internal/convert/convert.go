// Package convert turns Kubernetes API objects (k8s.io/api/core/v1) into podbus's protobuf messages and
// back, and holds the API's defaulting and validation of pods. It is used only at the API edge.
//
// Files: pod.go, node.go, event.go (conversions), warnings.go (fields podbus drops), defaults.go
// (DefaultPod), validate.go (ValidatePod, ValidatePodUpdate), qos.go (QOSClass).
package convert

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: "v1", Kind: kind}
}
