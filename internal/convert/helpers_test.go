package convert

import (
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var cmpOpts = []cmp.Option{
	cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }),
}

func ptr[T any](v T) *T { return &v }

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// ts is a UTC time with sub-second precision, to check nothing is rounded on the way.
func ts(sec int) metav1.Time {
	return metav1.NewTime(time.Date(2025, 3, 1, 12, 0, sec, 123456789, time.UTC))
}

// richPod sets every field podbus supports.
func richPod() *corev1.Pod {
	created, deleted, started := ts(0), ts(30), ts(5)
	probe := &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http"), Host: "h", Scheme: corev1.URISchemeHTTPS, HTTPHeaders: []corev1.HTTPHeader{{Name: "X-A", Value: "1"}}}},
		InitialDelaySeconds: 3, TimeoutSeconds: 2, PeriodSeconds: 7, SuccessThreshold: 1, FailureThreshold: 4,
		TerminationGracePeriodSeconds: ptr(int64(9)),
	}
	sel := &metav1.LabelSelector{
		MatchLabels:      map[string]string{"app": "web"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}},
	}
	term := corev1.NodeSelectorTerm{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}},
		MatchFields:      []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n9"}}},
	}
	paTerm := corev1.PodAffinityTerm{LabelSelector: sel, Namespaces: []string{"ns1"}, TopologyKey: "kubernetes.io/hostname", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}}
	honor, ignore := corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-1", GenerateName: "web-", Namespace: "prod", UID: "uid-1", ResourceVersion: "42", Generation: 2,
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "hi"},
			CreationTimestamp: created, DeletionTimestamp: &deleted, DeletionGracePeriodSeconds: ptr(int64(30)),
			Finalizers: []string{"example.com/f"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-uid",
				Controller: ptr(true), BlockOwnerDeletion: ptr(false)}},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1.36", Command: []string{"sh", "-c", "true"},
				ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile}},
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx:1.27", Command: []string{"nginx"}, Args: []string{"-g", "daemon off;"}, WorkingDir: "/srv",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, HostPort: 80, Protocol: corev1.ProtocolTCP, HostIP: "0.0.0.0"}},
				Env:   []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B"}},
				Resources: corev1.ResourceRequirements{
					Limits:   rl("cpu", "500m", "memory", "128Mi", "example.com/gpu", "1"),
					Requests: rl("cpu", "250m", "memory", "64Mi", "example.com/gpu", "1"),
				},
				LivenessProbe:          probe,
				ReadinessProbe:         &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080), Host: "x"}}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 2, FailureThreshold: 3},
				StartupProbe:           &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/ready"}}}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 30},
				TerminationMessagePath: "/tmp/msg", TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				ImagePullPolicy: corev1.PullAlways, Stdin: true, TTY: true,
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch", ReadOnly: true}},
			}},
			RestartPolicy:                 corev1.RestartPolicyOnFailure,
			TerminationGracePeriodSeconds: ptr(int64(45)),
			ActiveDeadlineSeconds:         ptr(int64(600)),
			DNSPolicy:                     corev1.DNSDefault,
			NodeSelector:                  map[string]string{"disk": "ssd"},
			ServiceAccountName:            "robot",
			DeprecatedServiceAccount:      "robot",
			NodeName:                      "node-1",
			HostNetwork:                   false,
			Hostname:                      "web",
			Subdomain:                     "svc",
			Affinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}},
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: term}},
				},
				PodAffinity: &corev1.PodAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution:  []corev1.PodAffinityTerm{paTerm},
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 5, PodAffinityTerm: paTerm}},
				},
				PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{paTerm},
				},
			},
			SchedulerName: "my-scheduler",
			Tolerations: []corev1.Toleration{
				{Key: "k", Operator: corev1.TolerationOpEqual, Value: "v", Effect: corev1.TaintEffectNoSchedule},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			},
			PriorityClassName: "high",
			Priority:          ptr(int32(1000)),
			PreemptionPolicy:  ptr(corev1.PreemptNever),
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel,
				MinDomains: ptr(int32(2)), NodeAffinityPolicy: &honor, NodeTaintsPolicy: &ignore, MatchLabelKeys: []string{"pod-template-hash"},
			}},
			EnableServiceLinks: ptr(false),
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastProbeTime: ts(1),
				LastTransitionTime: ts(2), Reason: "r", Message: "m"}},
			Message: "msg", Reason: "reason", NominatedNodeName: "node-2",
			HostIP: "10.0.0.1", HostIPs: []corev1.HostIP{{IP: "10.0.0.1"}},
			PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}, {IP: "fd00::5"}},
			StartTime: &started,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", Image: "busybox:1.36", ImageID: "sha256:1",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Signal: 0, Reason: "Completed",
					Message: "ok", StartedAt: ts(3), FinishedAt: ts(4), ContainerID: "containerd://i"}}, ContainerID: "containerd://i"}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "web", Ready: true, RestartCount: 2, Image: "nginx:1.27", ImageID: "sha256:2", ContainerID: "containerd://w", Started: ptr(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ts(6)}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Signal: 9,
					Reason: "OOMKilled", StartedAt: ts(1), FinishedAt: ts(2)}},
			}, {
				Name: "waiting", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "nope"}},
			}},
			QOSClass: corev1.PodQOSBurstable,
		},
	}
}
