package convert

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkPodToPB converts a pod as a client creates it, the conversion's round-trip check included.
func BenchmarkPodToPB(b *testing.B) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lt-0", Namespace: "default", Labels: map[string]string{"app": "lt", "run": "r1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.local/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
			}},
		}}},
	}
	DefaultPod(pod)
	b.ReportAllocs()
	for b.Loop() {
		if _, w := PodToPB(pod); len(w) > 0 {
			b.Fatal(w)
		}
	}
}
