package convert

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validPod is a defaulted pod that passes validation.
func validPod() *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "data"}},
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx:1.27",
				Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 80}},
				Env:          []corev1.EnvVar{{Name: "MODE", Value: "prod"}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				Resources:    corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi")},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Port: intstr.FromString("http")}}},
			}},
		},
	}
	DefaultPod(p)
	return p
}

// errKeys renders errors as "Type field" so tables can state the expected paths.
func errKeys(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, string(e.Type)+" "+e.Field)
	}
	return out
}

func TestValidatePod(t *testing.T) {
	const (
		req  = string(field.ErrorTypeRequired)
		inv  = string(field.ErrorTypeInvalid)
		dup  = string(field.ErrorTypeDuplicate)
		nsup = string(field.ErrorTypeNotSupported)
		forb = string(field.ErrorTypeForbidden)
		nf   = string(field.ErrorTypeNotFound)
	)
	c0 := "spec.containers[0]"
	tests := []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   []string
	}{
		{"valid", func(p *corev1.Pod) {}, nil},
		{"rich pod is valid", func(p *corev1.Pod) { *p = *richPod() }, nil},
		// metadata
		{"name required", func(p *corev1.Pod) { p.Name = "" }, []string{req + " metadata.name"}},
		{"generateName suffices", func(p *corev1.Pod) { p.Name, p.GenerateName = "", "web-" }, nil},
		{"bad generateName", func(p *corev1.Pod) { p.Name, p.GenerateName = "", "Web_" }, []string{inv + " metadata.generateName"}},
		{"name not a subdomain", func(p *corev1.Pod) { p.Name = "Web_1" }, []string{inv + " metadata.name"}},
		{"namespace not a label", func(p *corev1.Pod) { p.Namespace = "a.b" }, []string{inv + " metadata.namespace"}},
		{"bad label key", func(p *corev1.Pod) { p.Labels = map[string]string{"-x": "y"} }, []string{inv + " metadata.labels"}},
		{"bad label value", func(p *corev1.Pod) { p.Labels = map[string]string{"x": "a b"} }, []string{inv + " metadata.labels"}},
		{"bad annotation key", func(p *corev1.Pod) { p.Annotations = map[string]string{"a b": ""} }, []string{inv + " metadata.annotations"}},
		// containers
		{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, []string{req + " spec.containers"}},
		{"container name required", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "" }, []string{req + " " + c0 + ".name"}},
		{"container name not a label", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "Web" }, []string{inv + " " + c0 + ".name"}},
		{"duplicate container name", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{p.Spec.Containers[0]}
			p.Spec.InitContainers[0].LivenessProbe = nil
		}, []string{dup + " " + c0 + ".name"}},
		{"image required", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, []string{req + " " + c0 + ".image"}},
		{"image whitespace", func(p *corev1.Pod) { p.Spec.Containers[0].Image = " nginx" }, []string{inv + " " + c0 + ".image"}},
		{"imagePullPolicy enum", func(p *corev1.Pod) { p.Spec.Containers[0].ImagePullPolicy = "Sometimes" }, []string{nsup + " " + c0 + ".imagePullPolicy"}},
		{"imagePullPolicy required", func(p *corev1.Pod) { p.Spec.Containers[0].ImagePullPolicy = "" }, []string{req + " " + c0 + ".imagePullPolicy"}},
		{"terminationMessagePolicy enum", func(p *corev1.Pod) { p.Spec.Containers[0].TerminationMessagePolicy = "X" }, []string{nsup + " " + c0 + ".terminationMessagePolicy"}},
		// ports
		{"containerPort required", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 0 }, []string{req + " " + c0 + ".ports[0].containerPort"}},
		{"containerPort range", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 70000 }, []string{inv + " " + c0 + ".ports[0].containerPort"}},
		{"hostPort range", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = -1 }, []string{inv + " " + c0 + ".ports[0].hostPort"}},
		{"port name syntax", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Name = "a_b" }, []string{inv + " " + c0 + ".ports[0].name"}},
		{"duplicate port name", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "http", ContainerPort: 81, Protocol: corev1.ProtocolTCP})
		}, []string{dup + " " + c0 + ".ports[1].name"}},
		{"duplicate hostPort", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80, Protocol: "TCP"}, {ContainerPort: 81, HostPort: 80, Protocol: "TCP"}}
		}, []string{dup + " " + c0 + ".ports[1].hostPort"}},
		{"protocol enum", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = "ICMP" }, []string{nsup + " " + c0 + ".ports[0].protocol"}},
		{"hostNetwork needs hostPort == containerPort", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports[0].HostPort = 81
		}, []string{inv + " " + c0 + ".ports[0].hostPort"}},
		// env
		{"env name required", func(p *corev1.Pod) { p.Spec.Containers[0].Env[0].Name = "" }, []string{req + " " + c0 + ".env[0].name"}},
		{"env name syntax", func(p *corev1.Pod) { p.Spec.Containers[0].Env[0].Name = "1=A" }, []string{inv + " " + c0 + ".env[0].name"}},
		// volumes
		{"mount of unknown volume", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].Name = "other" }, []string{nf + " " + c0 + ".volumeMounts[0].name"}},
		{"mountPath required", func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].MountPath = "" }, []string{req + " " + c0 + ".volumeMounts[0].mountPath"}},
		{"duplicate volume", func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, p.Spec.Volumes[0]) }, []string{dup + " spec.volumes[1].name"}},
		{"volume without source", func(p *corev1.Pod) { p.Spec.Volumes[0].EmptyDir = nil }, []string{req + " spec.volumes[0]"}},
		// resources
		{"negative quantity", func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = rl("cpu", "-1") }, []string{inv + " " + c0 + ".resources.requests[cpu]"}},
		{"request above limit", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: rl("memory", "64Mi"), Requests: rl("memory", "128Mi")}
		}, []string{inv + " " + c0 + ".resources.requests[memory]"}},
		{"unknown standard resource", func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = rl("gpu", "1") }, []string{inv + " " + c0 + ".resources.requests[gpu]"}},
		{"extended resource needs a limit", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = rl("example.com/gpu", "1")
		}, []string{forb + " " + c0 + ".resources.limits"}},
		{"extended resource must be an integer", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: rl("example.com/gpu", "500m"), Requests: rl("example.com/gpu", "500m")}
		}, []string{inv + " " + c0 + ".resources.limits[example.com/gpu]", inv + " " + c0 + ".resources.requests[example.com/gpu]"}},
		// probes
		{"probe without handler", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.HTTPGet = nil }, []string{req + " " + c0 + ".livenessProbe"}},
		{"probe with two handlers", func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe.TCPSocket = &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}
		}, []string{forb + " " + c0 + ".livenessProbe.tcpSocket"}},
		{"probe port out of range", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.HTTPGet.Port = intstr.FromInt32(0) }, []string{inv + " " + c0 + ".livenessProbe.httpGet.port"}},
		{"probe port bad name", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.HTTPGet.Port = intstr.FromString("not_a_name") }, []string{inv + " " + c0 + ".livenessProbe.httpGet.port"}},
		{"probe scheme", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.HTTPGet.Scheme = "FTP" }, []string{nsup + " " + c0 + ".livenessProbe.httpGet.scheme"}},
		{"liveness successThreshold must be 1", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.SuccessThreshold = 2 }, []string{inv + " " + c0 + ".livenessProbe.successThreshold"}},
		{"negative probe period", func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe.PeriodSeconds = -1 }, []string{inv + " " + c0 + ".livenessProbe.periodSeconds"}},
		{"exec command required", func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{}}, SuccessThreshold: 1}
		}, []string{req + " " + c0 + ".readinessProbe.exec.command"}},
		{"init container probe", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{p.Spec.Containers[0]}
			p.Spec.InitContainers[0].Name = "init"
			p.Spec.InitContainers[0].Ports = nil
		}, []string{forb + " spec.initContainers[0].livenessProbe"}},
		// pod spec enums and numbers
		{"restartPolicy enum", func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, []string{nsup + " spec.restartPolicy"}},
		{"restartPolicy required", func(p *corev1.Pod) { p.Spec.RestartPolicy = "" }, []string{req + " spec.restartPolicy"}},
		{"dnsPolicy enum", func(p *corev1.Pod) { p.Spec.DNSPolicy = "Google" }, []string{nsup + " spec.dnsPolicy"}},
		{"dnsPolicy None needs dnsConfig", func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }, []string{req + " spec.dnsConfig"}},
		{"preemptionPolicy enum", func(p *corev1.Pod) { p.Spec.PreemptionPolicy = ptr(corev1.PreemptionPolicy("Always")) }, []string{nsup + " spec.preemptionPolicy"}},
		{"negative grace period", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr(int64(-1)) }, []string{inv + " spec.terminationGracePeriodSeconds"}},
		{"zero activeDeadlineSeconds", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(0)) }, []string{inv + " spec.activeDeadlineSeconds"}},
		{"nodeSelector syntax", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"a/b/c": "x"} }, []string{inv + " spec.nodeSelector"}},
		{"nodeName syntax", func(p *corev1.Pod) { p.Spec.NodeName = "Node_1" }, []string{inv + " spec.nodeName"}},
		{"hostname syntax", func(p *corev1.Pod) { p.Spec.Hostname = "a.b" }, []string{inv + " spec.hostname"}},
		// tolerations
		{"Exists with value", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"}}
		}, []string{inv + " spec.tolerations[0].operator"}},
		{"empty key needs Exists", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpEqual}}
		}, []string{inv + " spec.tolerations[0].operator"}},
		{"toleration effect enum", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: "NoWay"}}
		}, []string{nsup + " spec.tolerations[0].effect"}},
		{"tolerationSeconds needs NoExecute", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr(int64(1))}}
		}, []string{inv + " spec.tolerations[0].effect"}},
		{"toleration operator enum", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Like"}}
		}, []string{nsup + " spec.tolerations[0].operator"}},
		// affinity
		{"In without values", func(p *corev1.Pod) { p.Spec.Affinity = nodeAffinity(corev1.NodeSelectorOpIn) }, []string{req + " " + nodeReq + ".values"}},
		{"Exists with values", func(p *corev1.Pod) { p.Spec.Affinity = nodeAffinity(corev1.NodeSelectorOpExists, "a") }, []string{forb + " " + nodeReq + ".values"}},
		{"Gt with two values", func(p *corev1.Pod) { p.Spec.Affinity = nodeAffinity(corev1.NodeSelectorOpGt, "1", "2") }, []string{req + " " + nodeReq + ".values"}},
		{"Gt with a word", func(p *corev1.Pod) { p.Spec.Affinity = nodeAffinity(corev1.NodeSelectorOpLt, "ten") }, []string{inv + " " + nodeReq + ".values[0]"}},
		{"Gt ok", func(p *corev1.Pod) { p.Spec.Affinity = nodeAffinity(corev1.NodeSelectorOpGt, "10") }, nil},
		{"bad operator", func(p *corev1.Pod) { p.Spec.Affinity = nodeAffinity("Near", "a") }, []string{inv + " " + nodeReq + ".operator"}},
		{"no terms", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}
		}, []string{req + " spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"}},
		{"preferred weight", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 0}}}}
		}, []string{inv + " spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"}},
		{"pod anti-affinity topologyKey", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}}}}}}
		}, []string{
			req + " spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0].values",
			req + " spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
		}},
		// topology spread
		{"maxSkew", func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints = spread(0, "zone", corev1.DoNotSchedule) }, []string{inv + " spec.topologySpreadConstraints[0].maxSkew"}},
		{"topologyKey required", func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints = spread(1, "", corev1.DoNotSchedule) }, []string{req + " spec.topologySpreadConstraints[0].topologyKey"}},
		{"whenUnsatisfiable enum", func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints = spread(1, "zone", "Maybe") }, []string{nsup + " spec.topologySpreadConstraints[0].whenUnsatisfiable"}},
		{"whenUnsatisfiable required", func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints = spread(1, "zone", "") }, []string{nsup + " spec.topologySpreadConstraints[0].whenUnsatisfiable"}},
		{"duplicate constraint", func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = append(spread(1, "zone", corev1.DoNotSchedule), spread(2, "zone", corev1.DoNotSchedule)...)
		}, []string{dup + " spec.topologySpreadConstraints[1]"}},
		{"minDomains with ScheduleAnyway", func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = spread(1, "zone", corev1.ScheduleAnyway)
			p.Spec.TopologySpreadConstraints[0].MinDomains = ptr(int32(2))
		}, []string{inv + " spec.topologySpreadConstraints[0].minDomains"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPod()
			tt.mutate(p)
			got := errKeys(ValidatePod(p))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s\nall: %v", diff, ValidatePod(p))
			}
		})
	}
}

const nodeReq = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"

func nodeAffinity(op corev1.NodeSelectorOperator, values ...string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: op, Values: values}}}},
	}}}
}

func spread(skew int32, key string, when corev1.UnsatisfiableConstraintAction) []corev1.TopologySpreadConstraint {
	return []corev1.TopologySpreadConstraint{{MaxSkew: skew, TopologyKey: key, WhenUnsatisfiable: when,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
}

// The API turns these into a 422 whose causes clients read; the message must read like kube-apiserver's.
func TestValidatePodMessages(t *testing.T) {
	p := validPod()
	p.Spec.Containers = nil
	p.Spec.RestartPolicy = "Sometimes"
	got := ValidatePod(p).ToAggregate().Error()
	for _, want := range []string{
		"spec.containers: Required value",
		`spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("message %q does not contain %q", got, want)
		}
	}
}

func TestValidatePodUpdate(t *testing.T) {
	const (
		inv  = string(field.ErrorTypeInvalid)
		forb = string(field.ErrorTypeForbidden)
	)
	old := func() *corev1.Pod {
		p := validPod()
		p.Namespace, p.UID, p.ResourceVersion = "default", "uid-1", "5"
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1", ImagePullPolicy: "IfNotPresent",
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: "File"}}
		p.Spec.ActiveDeadlineSeconds = ptr(int64(100))
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/gate"}}
		return p
	}
	tests := []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   []string
	}{
		{"no change", func(p *corev1.Pod) {}, nil},
		{"no resourceVersion", func(p *corev1.Pod) { p.ResourceVersion = "" }, nil},
		{"labels and annotations", func(p *corev1.Pod) {
			p.Labels = map[string]string{"new": "x"}
			p.Annotations = map[string]string{"a": "b"}
		}, nil},
		{"images", func(p *corev1.Pod) {
			p.Spec.Containers[0].Image = "nginx:1.28"
			p.Spec.InitContainers[0].Image = "busybox:2"
		}, nil},
		{"status is ignored", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, nil},
		{"decrease activeDeadlineSeconds", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(50)) }, nil},
		{"increase activeDeadlineSeconds", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(200)) }, []string{inv + " spec.activeDeadlineSeconds"}},
		{"remove activeDeadlineSeconds", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil }, []string{inv + " spec.activeDeadlineSeconds"}},
		{"add toleration", func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists})
		}, nil},
		{"change tolerationSeconds", func(p *corev1.Pod) { p.Spec.Tolerations[0].TolerationSeconds = ptr(int64(10)) }, nil},
		{"remove toleration", func(p *corev1.Pod) { p.Spec.Tolerations = p.Spec.Tolerations[1:] }, []string{forb + " spec.tolerations"}},
		{"remove scheduling gate", func(p *corev1.Pod) { p.Spec.SchedulingGates = nil }, nil},
		{"add scheduling gate", func(p *corev1.Pod) {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "example.com/other"})
		}, []string{forb + " spec.schedulingGates[1].name"}},
		{"rename", func(p *corev1.Pod) { p.Name = "other" }, []string{inv + " metadata.name"}},
		{"new uid", func(p *corev1.Pod) { p.UID = "uid-2" }, []string{inv + " metadata.uid"}},
		{"other namespace", func(p *corev1.Pod) { p.Namespace = "kube-system" }, []string{inv + " metadata.namespace"}},
		{"change nodeSelector", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"a": "b"} }, []string{forb + " spec"}},
		{"change resources", func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = rl("cpu", "1") }, []string{forb + " spec"}},
		{"add container", func(p *corev1.Pod) {
			c := p.Spec.Containers[0]
			c.Name = "two"
			p.Spec.Containers = append(p.Spec.Containers, c)
		}, []string{forb + " spec.containers"}},
		{"invalid new image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, []string{"FieldValueRequired spec.containers[0].image"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := old()
			n := o.DeepCopy()
			tt.mutate(n)
			errs := ValidatePodUpdate(n, o)
			if diff := cmp.Diff(tt.want, errKeys(errs)); diff != "" {
				t.Errorf("errors (-want +got):\n%s\nall: %v", diff, errs)
			}
		})
	}
}

func TestValidatePodUpdateMessage(t *testing.T) {
	o := validPod()
	n := o.DeepCopy()
	n.Spec.NodeName = "node-9"
	errs := ValidatePodUpdate(n, o)
	if len(errs) != 1 {
		t.Fatalf("errors = %v, want one", errs)
	}
	want := "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
	if !strings.HasPrefix(errs[0].Detail, want) || !strings.Contains(errs[0].Detail, "node-9") {
		t.Errorf("detail = %q", errs[0].Detail)
	}
}
