package convert

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestQOSClass(t *testing.T) {
	res := func(lim, req corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: lim, Requests: req}}
	}
	tests := []struct {
		name  string
		ctrs  []corev1.Container
		inits []corev1.Container
		want  corev1.PodQOSClass
	}{
		{"nothing", []corev1.Container{res(nil, nil)}, nil, corev1.PodQOSBestEffort},
		{"only extended resources", []corev1.Container{res(rl("example.com/gpu", "1"), rl("example.com/gpu", "1"))}, nil, corev1.PodQOSBestEffort},
		{"zero requests", []corev1.Container{res(nil, rl("cpu", "0"))}, nil, corev1.PodQOSBestEffort},
		{"requests only", []corev1.Container{res(nil, rl("cpu", "100m"))}, nil, corev1.PodQOSBurstable},
		{"equal limits", []corev1.Container{res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1000m", "memory", "1Gi"))}, nil, corev1.PodQOSGuaranteed},
		{"request below limit", []corev1.Container{res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "500m", "memory", "1Gi"))}, nil, corev1.PodQOSBurstable},
		{"limit only cpu", []corev1.Container{res(rl("cpu", "1"), rl("cpu", "1"))}, nil, corev1.PodQOSBurstable},
		{"one of two containers unlimited", []corev1.Container{
			res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")), res(nil, nil)}, nil, corev1.PodQOSBurstable},
		{"init container counts", []corev1.Container{res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))},
			[]corev1.Container{res(nil, rl("memory", "1Mi"))}, corev1.PodQOSBurstable},
		{"guaranteed with init", []corev1.Container{res(rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))},
			[]corev1.Container{res(rl("cpu", "2", "memory", "2Gi"), rl("cpu", "2", "memory", "2Gi"))}, corev1.PodQOSGuaranteed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: tt.ctrs, InitContainers: tt.inits}}
			if got := QOSClass(p); got != tt.want {
				t.Errorf("QOSClass = %s, want %s", got, tt.want)
			}
		})
	}
}
