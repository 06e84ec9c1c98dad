package cri

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbus/podbus/agent"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func ptr[T any](v T) *T { return &v }

// baseSpec is the part of containerd's default spec the security options change.
func baseSpec() *oci.Spec {
	return &oci.Spec{
		Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
			Bounding: slices.Clone(defaultCapabilities), Effective: slices.Clone(defaultCapabilities), Permitted: slices.Clone(defaultCapabilities)}},
		Root:  &specs.Root{Path: "rootfs"},
		Linux: &specs.Linux{MaskedPaths: []string{"/proc/kcore"}, ReadonlyPaths: []string{"/proc/sys"}},
	}
}

func TestSecurityContextToSpec(t *testing.T) {
	const pod = "p_ns(uid)"
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(defaultCapabilities), func(c string) bool { return slices.Contains(drop, c) })
	}
	tests := []struct {
		name      string
		pod       *pb.PodSecurityContext
		sc        *pb.SecurityContext
		imageUser string
		wantErr   string // substring of the error (which wraps agent.ErrContainerConfig)
		check     func(t *testing.T, s *oci.Spec)
	}{
		{name: "nothing set keeps the default capabilities, no seccomp", check: func(t *testing.T, s *oci.Spec) {
			if !cmp.Equal(s.Process.Capabilities.Effective, defaultCapabilities) || s.Linux.Seccomp != nil || s.Process.NoNewPrivileges {
				t.Errorf("caps %v seccomp %v nnp %v", s.Process.Capabilities.Effective, s.Linux.Seccomp, s.Process.NoNewPrivileges)
			}
		}},
		{name: "runAsUser and runAsGroup from the pod, supplemental groups and fsGroup",
			pod: &pb.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(3000)), SupplementalGroups: []int64{4000}, FsGroup: ptr(int64(2000))},
			check: func(t *testing.T, s *oci.Spec) {
				want := specs.User{UID: 1000, GID: 3000, AdditionalGids: []uint32{4000, 2000}}
				if diff := cmp.Diff(want, s.Process.User); diff != "" {
					t.Errorf("user (-want +got):\n%s", diff)
				}
			}},
		{name: "the container's runAsUser wins over the pod's",
			pod: &pb.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(3000))}, sc: &pb.SecurityContext{RunAsUser: ptr(int64(7))},
			check: func(t *testing.T, s *oci.Spec) {
				if s.Process.User.UID != 7 || s.Process.User.GID != 3000 {
					t.Errorf("user = %+v, want 7:3000", s.Process.User)
				}
			}},
		{name: "runAsNonRoot with a non-root runAsUser", sc: &pb.SecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(1)), RunAsGroup: ptr(int64(1))}},
		{name: "runAsNonRoot with a non-root image user", sc: &pb.SecurityContext{RunAsNonRoot: ptr(true)}, imageUser: "101:101"},
		{name: "runAsNonRoot refuses a root image user", pod: &pb.PodSecurityContext{RunAsNonRoot: ptr(true)},
			wantErr: `container has runAsNonRoot and image will run as root (pod: "p_ns(uid)", container: c)`},
		{name: "runAsNonRoot refuses runAsUser 0", sc: &pb.SecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(0))},
			wantErr: `container's runAsUser breaks non-root policy (pod: "p_ns(uid)", container: c)`},
		{name: "runAsNonRoot cannot verify a named user", sc: &pb.SecurityContext{RunAsNonRoot: ptr(true)}, imageUser: "nginx",
			wantErr: "image has non-numeric user (nginx), cannot verify user is non-root"},
		{name: "capabilities add and drop", sc: &pb.SecurityContext{Capabilities: &pb.Capabilities{Add: []string{"NET_ADMIN"}, Drop: []string{"KILL", "CAP_CHOWN"}}},
			check: func(t *testing.T, s *oci.Spec) {
				want := append(without("CAP_KILL", "CAP_CHOWN"), "CAP_NET_ADMIN")
				for _, got := range [][]string{s.Process.Capabilities.Bounding, s.Process.Capabilities.Effective, s.Process.Capabilities.Permitted} {
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("caps (-want +got):\n%s", diff)
					}
				}
			}},
		{name: "drop ALL then add one", sc: &pb.SecurityContext{Capabilities: &pb.Capabilities{Add: []string{"NET_BIND_SERVICE"}, Drop: []string{"ALL"}}},
			check: func(t *testing.T, s *oci.Spec) {
				if !cmp.Equal(s.Process.Capabilities.Effective, []string{"CAP_NET_BIND_SERVICE"}) {
					t.Errorf("caps = %v", s.Process.Capabilities.Effective)
				}
			}},
		{name: "allowPrivilegeEscalation false sets no_new_privs", sc: &pb.SecurityContext{AllowPrivilegeEscalation: ptr(false)},
			check: func(t *testing.T, s *oci.Spec) {
				if !s.Process.NoNewPrivileges {
					t.Error("no_new_privs not set")
				}
			}},
		{name: "readOnlyRootFilesystem", sc: &pb.SecurityContext{ReadOnlyRootFilesystem: ptr(true)},
			check: func(t *testing.T, s *oci.Spec) {
				if !s.Root.Readonly {
					t.Error("root not read-only")
				}
			}},
		{name: "RuntimeDefault seccomp from the pod", pod: &pb.PodSecurityContext{SeccompProfile: &pb.SeccompProfile{Type: "RuntimeDefault"}},
			check: func(t *testing.T, s *oci.Spec) {
				if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno || len(s.Linux.Seccomp.Syscalls) == 0 {
					t.Errorf("seccomp = %+v, want containerd's default profile", s.Linux.Seccomp)
				}
			}},
		{name: "Unconfined in the container overrides the pod's RuntimeDefault",
			pod: &pb.PodSecurityContext{SeccompProfile: &pb.SeccompProfile{Type: "RuntimeDefault"}}, sc: &pb.SecurityContext{SeccompProfile: &pb.SeccompProfile{Type: "Unconfined"}},
			check: func(t *testing.T, s *oci.Spec) {
				if s.Linux.Seccomp != nil {
					t.Errorf("seccomp = %+v, want none", s.Linux.Seccomp)
				}
			}},
		{name: "Localhost seccomp is refused", sc: &pb.SecurityContext{SeccompProfile: &pb.SeccompProfile{Type: "Localhost", LocalhostProfile: "x.json"}},
			wantErr: "Localhost is not supported"},
		{name: "privileged: every capability, no masked paths", sc: &pb.SecurityContext{Privileged: ptr(true)},
			check: func(t *testing.T, s *oci.Spec) {
				if len(s.Linux.MaskedPaths) != 0 || len(s.Linux.ReadonlyPaths) != 0 || !slices.Contains(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN") {
					t.Errorf("masked %v readonly %v caps %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths, s.Process.Capabilities.Bounding)
				}
			}},
		{name: "privileged without escalation is contradictory", sc: &pb.SecurityContext{Privileged: ptr(true), AllowPrivilegeEscalation: ptr(false)},
			wantErr: "cannot set allowPrivilegeEscalation to false and privileged to true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &pb.Container{Name: "c", SecurityContext: tt.sc}
			plan, err := planSecurity(tt.pod, c, tt.imageUser, pod)
			if tt.wantErr != "" {
				if !errors.Is(err, agent.ErrContainerConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrContainerConfig with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := baseSpec()
			for _, o := range plan.opts() {
				if err := o(context.Background(), nil, &containers.Container{}, s); err != nil {
					t.Fatal(err)
				}
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

func TestPlanUser(t *testing.T) {
	tests := []struct {
		name      string
		pod       *pb.PodSecurityContext
		imageUser string
		want      string
	}{
		{"none keeps the image's", nil, "101", ""},
		{"uid alone: group from the image's passwd", &pb.PodSecurityContext{RunAsUser: ptr(int64(5))}, "", "5"},
		{"group alone keeps the image's uid", &pb.PodSecurityContext{RunAsGroup: ptr(int64(6))}, "101:101", "101:6"},
		{"group alone on a root image", &pb.PodSecurityContext{RunAsGroup: ptr(int64(6))}, "", "0:6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := planSecurity(tt.pod, &pb.Container{Name: "c"}, tt.imageUser, "p")
			if err != nil || plan.user != tt.want {
				t.Errorf("user = %q, %v; want %q", plan.user, err, tt.want)
			}
		})
	}
}
