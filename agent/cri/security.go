package cri

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cap"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbus/podbus/agent"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// defaultCapabilities are the capabilities a container gets unless its securityContext adds or drops
// some: containerd's CRI default set (Docker's).
var defaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// Seccomp profile types.
const (
	seccompRuntimeDefault = "RuntimeDefault"
	seccompUnconfined     = "Unconfined"
	seccompLocalhost      = "Localhost"
)

// securityPlan is what a container's securityContext (over its pod's) asks of the OCI spec.
type securityPlan struct {
	user         string   // "uid" or "uid:gid" for oci.WithUser; "" keeps the image's user
	groups       []uint32 // supplemental groups (with fsGroup), added to the image user's
	caps         []string // Bounding, Effective and Permitted
	privileged   bool
	noNewPrivs   bool
	readOnlyRoot bool
	seccomp      string // seccompRuntimeDefault, or "" (unconfined)
}

// planSecurity merges the pod's and the container's security contexts as the kubelet does (the
// container's field wins) and checks runAsNonRoot against imageUser (the image config's User).
// pod is "name_namespace(uid)" for the messages, which are the kubelet's.
func planSecurity(ps *pb.PodSecurityContext, c *pb.Container, imageUser, pod string) (securityPlan, error) {
	sc := c.GetSecurityContext()
	if sc == nil {
		sc = &pb.SecurityContext{}
	}
	if ps == nil {
		ps = &pb.PodSecurityContext{}
	}
	var p securityPlan
	runAsUser, runAsGroup := sc.RunAsUser, sc.RunAsGroup
	if runAsUser == nil {
		runAsUser = ps.RunAsUser
	}
	if runAsGroup == nil {
		runAsGroup = ps.RunAsGroup
	}
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = ps.RunAsNonRoot
	}
	if nonRoot != nil && *nonRoot {
		if err := verifyNonRoot(runAsUser, imageUser, c.GetName(), pod); err != nil {
			return p, err
		}
	}
	switch {
	case runAsUser != nil && runAsGroup != nil:
		p.user = fmt.Sprintf("%d:%d", *runAsUser, *runAsGroup)
	case runAsUser != nil:
		p.user = strconv.FormatInt(*runAsUser, 10) // the group from the image's /etc/passwd
	case runAsGroup != nil:
		u, _, _ := strings.Cut(imageUser, ":")
		if u == "" {
			u = "0"
		}
		p.user = u + ":" + strconv.FormatInt(*runAsGroup, 10)
	}
	for _, g := range ps.GetSupplementalGroups() {
		p.groups = append(p.groups, uint32(g))
	}
	if ps.FsGroup != nil && !slices.Contains(p.groups, uint32(*ps.FsGroup)) {
		p.groups = append(p.groups, uint32(*ps.FsGroup))
	}

	p.privileged = sc.GetPrivileged()
	p.caps = capabilities(sc.GetCapabilities())
	p.noNewPrivs = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	if p.privileged && p.noNewPrivs {
		return p, fmt.Errorf("%w: cannot set allowPrivilegeEscalation to false and privileged to true", agent.ErrContainerConfig)
	}
	p.readOnlyRoot = sc.GetReadOnlyRootFilesystem()

	profile := sc.GetSeccompProfile()
	if profile == nil {
		profile = ps.GetSeccompProfile()
	}
	switch t := profile.GetType(); t {
	case "", seccompUnconfined:
	case seccompRuntimeDefault:
		if !p.privileged {
			p.seccomp = seccompRuntimeDefault
		}
	case seccompLocalhost:
		return p, fmt.Errorf("%w: seccomp profile type Localhost is not supported by podbus", agent.ErrContainerConfig)
	default:
		return p, fmt.Errorf("%w: unknown seccomp profile type %q", agent.ErrContainerConfig, t)
	}
	return p, nil
}

// verifyNonRoot is the kubelet's runAsNonRoot check, with its messages.
func verifyNonRoot(runAsUser *int64, imageUser, container, pod string) error {
	if runAsUser != nil {
		if *runAsUser == 0 {
			return fmt.Errorf("%w: container's runAsUser breaks non-root policy (pod: %q, container: %s)", agent.ErrContainerConfig, pod, container)
		}
		return nil
	}
	u, _, _ := strings.Cut(imageUser, ":")
	if u == "" {
		u = "0"
	}
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)",
			agent.ErrContainerConfig, u, pod, container)
	}
	if uid == 0 {
		return fmt.Errorf("%w: container has runAsNonRoot and image will run as root (pod: %q, container: %s)", agent.ErrContainerConfig, pod, container)
	}
	return nil
}

// capabilities applies add and drop to the default set as containerd's CRI plugin does: ALL in add
// starts from every known capability, ALL in drop from none; names get their CAP_ prefix.
func capabilities(c *pb.Capabilities) []string {
	norm := func(names []string) (all bool, out []string) {
		for _, n := range names {
			n = strings.ToUpper(n)
			if n == "ALL" {
				all = true
				continue
			}
			if !strings.HasPrefix(n, "CAP_") {
				n = "CAP_" + n
			}
			out = append(out, n)
		}
		return all, out
	}
	addAll, add := norm(c.GetAdd())
	dropAll, drop := norm(c.GetDrop())
	caps := slices.Clone(defaultCapabilities)
	if addAll {
		caps = cap.Known()
	}
	if dropAll {
		caps = nil
	}
	for _, a := range add {
		if !slices.Contains(caps, a) {
			caps = append(caps, a)
		}
	}
	return slices.DeleteFunc(caps, func(c string) bool { return slices.Contains(drop, c) })
}

// opts are the spec options of the plan, to apply after the image's config.
func (p securityPlan) opts() []oci.SpecOpts {
	var opts []oci.SpecOpts
	if p.user != "" {
		opts = append(opts, withUser(p.user))
	}
	if len(p.groups) > 0 {
		opts = append(opts, withAdditionalGroups(p.groups))
	}
	if p.privileged {
		opts = append(opts, oci.WithPrivileged, oci.WithHostDevices, oci.WithAllDevicesAllowed)
	} else {
		opts = append(opts, oci.WithCapabilities(p.caps))
	}
	if p.noNewPrivs {
		opts = append(opts, oci.WithNoNewPrivileges)
	}
	if p.readOnlyRoot {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	if p.seccomp == seccompRuntimeDefault {
		opts = append(opts, seccomp.WithDefaultProfile()) // last: the profile depends on the capabilities
	}
	return opts
}

// withUser sets "uid:gid" directly and lets containerd look a lone uid's group up in the image.
func withUser(user string) oci.SpecOpts {
	u, g, ok := strings.Cut(user, ":")
	uid, uerr := strconv.ParseUint(u, 10, 32)
	gid, gerr := strconv.ParseUint(g, 10, 32)
	if !ok || uerr != nil || gerr != nil {
		return oci.WithUser(user)
	}
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.User.UID, s.Process.User.GID = uint32(uid), uint32(gid)
		s.Process.User.AdditionalGids = nil // the image user's groups do not apply to another user
		return nil
	}
}

func withAdditionalGroups(groups []uint32) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		for _, g := range groups {
			if !slices.Contains(s.Process.User.AdditionalGids, g) {
				s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, g)
			}
		}
		return nil
	}
}
