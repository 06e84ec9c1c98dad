package convert

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func notReadyUnreachable() []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
	}
}

func TestDefaultPodMinimal(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Image: "nginx",
		Ports:          []corev1.ContainerPort{{ContainerPort: 80}},
		LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 3},
		Resources:      corev1.ResourceRequirements{Limits: rl("cpu", "1", "memory", "1Gi"), Requests: rl("cpu", "500m")},
	}}, Volumes: []corev1.Volume{{Name: "v"}}}}
	DefaultPod(p)
	want := &corev1.Pod{}
	want.Namespace = "default"
	want.Spec = corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		Containers: []corev1.Container{{
			Name: "c", Image: "nginx",
			Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
			LivenessProbe: &corev1.Probe{
				ProbeHandler:   corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(80), Scheme: corev1.URISchemeHTTP}},
				TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
			},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:   corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
				TimeoutSeconds: 1, PeriodSeconds: 3, SuccessThreshold: 1, FailureThreshold: 3,
			},
			Resources:                corev1.ResourceRequirements{Limits: rl("cpu", "1", "memory", "1Gi"), Requests: rl("cpu", "500m", "memory", "1Gi")},
			TerminationMessagePath:   "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			ImagePullPolicy:          corev1.PullAlways,
		}},
		RestartPolicy:                 corev1.RestartPolicyAlways,
		TerminationGracePeriodSeconds: ptr(int64(30)),
		DNSPolicy:                     corev1.DNSClusterFirst,
		ServiceAccountName:            "default",
		DeprecatedServiceAccount:      "default",
		SchedulerName:                 "default-scheduler",
		Tolerations:                   notReadyUnreachable(),
		Priority:                      ptr(int32(0)),
		PreemptionPolicy:              ptr(corev1.PreemptLowerPriority),
		EnableServiceLinks:            ptr(true),
	}
	if diff := cmp.Diff(want, p, cmpOpts...); diff != "" {
		t.Errorf("DefaultPod (-want +got):\n%s", diff)
	}
	// Idempotent: the API may default update bodies too.
	again := p.DeepCopy()
	DefaultPod(again)
	if diff := cmp.Diff(p, again, cmpOpts...); diff != "" {
		t.Errorf("second DefaultPod changed the pod:\n%s", diff)
	}
}

func TestDefaultPodKeepsSetValues(t *testing.T) {
	p := richPod()
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(5))})
	want := p.DeepCopy()
	DefaultPod(p)
	if diff := cmp.Diff(want, p, cmpOpts...); diff != "" {
		t.Errorf("DefaultPod changed explicit values (-want +got):\n%s", diff)
	}
}

func TestImagePullPolicyDefault(t *testing.T) {
	tests := []struct {
		image string
		want  corev1.PullPolicy
	}{
		{"nginx", corev1.PullAlways},
		{"nginx:latest", corev1.PullAlways},
		{"nginx:1.27", corev1.PullIfNotPresent},
		{"registry:5000/team/app", corev1.PullAlways},
		{"registry:5000/team/app:v2", corev1.PullIfNotPresent},
		{"app@sha256:abcd", corev1.PullIfNotPresent},
		{"app:latest@sha256:abcd", corev1.PullAlways},
	}
	for _, tt := range tests {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: tt.image}}}}
		DefaultPod(p)
		if got := p.Spec.Containers[0].ImagePullPolicy; got != tt.want {
			t.Errorf("image %q: imagePullPolicy = %s, want %s", tt.image, got, tt.want)
		}
	}
}

func TestDefaultTolerations(t *testing.T) {
	tests := []struct {
		name string
		in   []corev1.Toleration
		want []corev1.Toleration
	}{
		{"none", nil, notReadyUnreachable()},
		{"tolerate everything", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		{"own not-ready", []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists}},
			[]corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists}, notReadyUnreachable()[1]}},
		{"NoSchedule does not count", []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			append([]corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, notReadyUnreachable()...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, defaultTolerations(tt.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultPodPriorityAndHostNetwork(t *testing.T) {
	tests := []struct {
		name      string
		class     string
		host      bool
		wantPrio  int32
		wantHostP int32
	}{
		{"no class", "", false, 0, 0},
		{"node critical", "system-node-critical", false, 2000001000, 0},
		{"cluster critical + host network", "system-cluster-critical", true, 2000000000, 8080},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{PriorityClassName: tt.class, HostNetwork: tt.host,
				Containers: []corev1.Container{{Name: "c", Image: "i", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
			DefaultPod(p)
			if got := *p.Spec.Priority; got != tt.wantPrio {
				t.Errorf("priority = %d, want %d", got, tt.wantPrio)
			}
			if got := p.Spec.Containers[0].Ports[0].HostPort; got != tt.wantHostP {
				t.Errorf("hostPort = %d, want %d", got, tt.wantHostP)
			}
		})
	}
}
