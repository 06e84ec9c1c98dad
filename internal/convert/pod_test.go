package convert

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestPodRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		pod  func() *corev1.Pod
	}{
		{"rich", richPod},
		{"minimal", func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: richPod().ObjectMeta,
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
		}},
		{"defaulted", func() *corev1.Pod {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i",
				Resources:      corev1.ResourceRequirements{Limits: rl("cpu", "1", "memory", "1Gi")},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}},
			}}}}
			p.Name = "p"
			DefaultPod(p)
			return p
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.pod()
			msg, warnings := PodToPB(in)
			if len(warnings) != 0 {
				t.Errorf("warnings for a fully supported pod: %q", warnings)
			}
			got := PodFromPB(msg, 42)
			want := in.DeepCopy()
			want.TypeMeta.APIVersion, want.TypeMeta.Kind = "v1", "Pod"
			want.ResourceVersion = "42"
			if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodToPBFields(t *testing.T) {
	in := richPod()
	in.Spec.Containers[0].Resources.Requests["cpu"] = resource.MustParse("0.25")
	in.Spec.Containers[0].Resources.Limits["memory"] = resource.MustParse("1024Mi")
	msg, _ := PodToPB(in)
	c := msg.GetSpec().GetContainers()[0]
	if got := c.GetResources().GetRequests()["cpu"]; got != "250m" {
		t.Errorf("cpu request = %q, want canonical 250m", got)
	}
	if got := c.GetResources().GetLimits()["memory"]; got != "1Gi" {
		t.Errorf("memory limit = %q, want canonical 1Gi", got)
	}
	if got := c.GetLivenessProbe().GetHttpGet().GetPort(); got != "http" {
		t.Errorf("named port = %q", got)
	}
	if got := c.GetReadinessProbe().GetTcpSocket().GetPort(); got != "8080" {
		t.Errorf("numeric port = %q", got)
	}
	if got := msg.GetMetadata().GetCreationTimestamp().GetNanos(); got != 123456789 {
		t.Errorf("creationTimestamp nanos = %d, want sub-second precision kept", got)
	}
	if msg.GetInternal() != nil {
		t.Errorf("internal set from an API object")
	}
}

func TestPodFromPBHidesInternals(t *testing.T) {
	tests := []struct {
		name    string
		rev     uint64
		wantRV  string
		in      *pb.Pod
		wantNil bool
	}{
		{name: "revision", rev: 7, wantRV: "7", in: &pb.Pod{Metadata: &pb.ObjectMeta{Name: "a"}, Internal: &pb.PodInternal{CorrelationId: "c"}}},
		{name: "no revision", rev: 0, wantRV: "", in: &pb.Pod{}},
		{name: "nil", in: nil, wantNil: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PodFromPB(tt.in, tt.rev)
			if tt.wantNil {
				if got != nil {
					t.Fatalf("got %v, want nil", got)
				}
				return
			}
			if got.ResourceVersion != tt.wantRV {
				t.Errorf("resourceVersion = %q, want %q", got.ResourceVersion, tt.wantRV)
			}
			if got.Annotations != nil {
				t.Errorf("annotations = %v: internals leaked", got.Annotations)
			}
		})
	}
}

func TestIntOrString(t *testing.T) {
	tests := []struct {
		in   string
		want intstr.IntOrString
	}{
		{"8080", intstr.FromInt32(8080)},
		{"http", intstr.FromString("http")},
		{"", intstr.IntOrString{}},
		{"-1", intstr.FromString("-1")},
		{"99999999999", intstr.FromString("99999999999")},
	}
	for _, tt := range tests {
		if got := intOrString(tt.in); got != tt.want {
			t.Errorf("intOrString(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

func TestPodToPBWarnings(t *testing.T) {
	base := func() *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	}
	tests := []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   []string
	}{
		{"none", func(p *corev1.Pod) {}, nil},
		{"env valueFrom", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		}, []string{"spec.containers[0].env[1].valueFrom: " + unsupported}},
		{"hostPath volume", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}}}
		}, nil}, // volume sources are kept for the agent
		{"emptyDir medium", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}
		}, nil},
		{"security contexts", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr(int64(1)), SELinuxOptions: &corev1.SELinuxOptions{User: "u"}}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(true), ProcMount: ptr(corev1.UnmaskedProcMount)}
		}, []string{"spec.containers[0].securityContext.procMount: " + unsupported, "spec.securityContext.seLinuxOptions: " + unsupported}},
		{"lifecycle, envFrom, subPath", func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"x"}}}}
			c.EnvFrom = []corev1.EnvFromSource{{Prefix: "P"}}
			c.VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/v", SubPath: "s"}}
		}, []string{
			"spec.containers[0].envFrom: " + unsupported,
		}},
		{"grpc probe", func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9}}}
		}, []string{"spec.containers[0].livenessProbe.grpc: " + unsupported}},
		{"pod-level extras", func(p *corev1.Pod) {
			p.Spec.HostPID = true
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "g"}}
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{}}
		}, []string{
			"spec.ephemeralContainers: " + unsupported,
			"spec.hostPID: " + unsupported,
			"spec.schedulingGates: " + unsupported,
		}},
		{"server bookkeeping is silent", func(p *corev1.Pod) {
			p.ResourceVersion = "9"
			//lint:ignore SA1019 clients may still send it
			p.SelfLink = "/api/v1/x"
			p.Spec.DeprecatedServiceAccount = "sa"
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}}
			p.Status.HostIPs = []corev1.HostIP{{IP: "1.2.3.4"}}
		}, nil},
		{"quantity spelling is not a loss", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = rl("cpu", "0.5", "memory", "1048576")
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.mutate(p)
			_, got := PodToPB(p)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}
