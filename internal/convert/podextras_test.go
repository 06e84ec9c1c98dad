package convert

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestPodExtrasRoundTrip(t *testing.T) {
	in := &corev1.Pod{Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(3000)),
			RunAsNonRoot: ptr(true), SupplementalGroups: []int64{4000}, FSGroup: ptr(int64(2000)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		HostAliases: []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}},
		DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"x.local"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr("2")}, {Name: "edns0"}}},
		Containers: []corev1.Container{{Name: "c", Image: "i", Stdin: true, StdinOnce: true, TTY: true,
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(1)), RunAsGroup: ptr(int64(2)),
				RunAsNonRoot: ptr(false), ReadOnlyRootFilesystem: ptr(true), Privileged: ptr(false),
				AllowPrivilegeEscalation: ptr(false),
				Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("p.json")}},
			Lifecycle: &corev1.Lifecycle{
				PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/up", Port: intstr.FromInt32(8080)}},
				PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 1"}}},
			}}},
		InitContainers: []corev1.Container{{Name: "i", Image: "i",
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}}}},
	}}
	msg, warnings := PodToPB(in)
	if len(warnings) != 0 {
		t.Errorf("warnings: %q", warnings)
	}
	got := PodFromPB(msg, 0)
	want := in.DeepCopy()
	want.TypeMeta.APIVersion, want.TypeMeta.Kind = "v1", "Pod"
	if diff := cmp.Diff(want.Spec, got.Spec, cmpOpts...); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}
