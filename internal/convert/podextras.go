package convert

import (
	corev1 "k8s.io/api/core/v1"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The pod fields the agent applies to the container runtime: security contexts, lifecycle hooks,
// host aliases and DNS configuration. Fields of them podbus does not apply (SELinux, AppArmor,
// sysctls, procMount, Windows options) are lost in conversion and so warned about.

func podExtrasToPB(s *corev1.PodSpec, out *pb.PodSpec) {
	if sc := s.SecurityContext; sc != nil {
		out.SecurityContext = &pb.PodSecurityContext{
			RunAsUser: ptrCopy(sc.RunAsUser), RunAsGroup: ptrCopy(sc.RunAsGroup), RunAsNonRoot: ptrCopy(sc.RunAsNonRoot),
			SupplementalGroups: append([]int64(nil), sc.SupplementalGroups...), FsGroup: ptrCopy(sc.FSGroup),
			SeccompProfile: seccompToPB(sc.SeccompProfile),
		}
	}
	for _, h := range s.HostAliases {
		out.HostAliases = append(out.HostAliases, &pb.HostAlias{Ip: h.IP, Hostnames: copyStrings(h.Hostnames)})
	}
	if d := s.DNSConfig; d != nil {
		out.DnsConfig = &pb.PodDNSConfig{Nameservers: copyStrings(d.Nameservers), Searches: copyStrings(d.Searches)}
		for _, o := range d.Options {
			out.DnsConfig.Options = append(out.DnsConfig.Options, &pb.PodDNSConfigOption{Name: o.Name, Value: ptrCopy(o.Value)})
		}
	}
}

func podExtrasFromPB(s *pb.PodSpec, out *corev1.PodSpec) {
	if sc := s.GetSecurityContext(); sc != nil {
		out.SecurityContext = &corev1.PodSecurityContext{
			RunAsUser: ptrCopy(sc.RunAsUser), RunAsGroup: ptrCopy(sc.RunAsGroup), RunAsNonRoot: ptrCopy(sc.RunAsNonRoot),
			SupplementalGroups: append([]int64(nil), sc.GetSupplementalGroups()...), FSGroup: ptrCopy(sc.FsGroup),
			SeccompProfile: seccompFromPB(sc.GetSeccompProfile()),
		}
	}
	for _, h := range s.GetHostAliases() {
		out.HostAliases = append(out.HostAliases, corev1.HostAlias{IP: h.GetIp(), Hostnames: copyStrings(h.GetHostnames())})
	}
	if d := s.GetDnsConfig(); d != nil {
		out.DNSConfig = &corev1.PodDNSConfig{Nameservers: copyStrings(d.GetNameservers()), Searches: copyStrings(d.GetSearches())}
		for _, o := range d.GetOptions() {
			out.DNSConfig.Options = append(out.DNSConfig.Options, corev1.PodDNSConfigOption{Name: o.GetName(), Value: ptrCopy(o.Value)})
		}
	}
}

func containerExtrasToPB(c *corev1.Container, out *pb.Container) {
	out.StdinOnce = c.StdinOnce
	if sc := c.SecurityContext; sc != nil {
		out.SecurityContext = &pb.SecurityContext{
			RunAsUser: ptrCopy(sc.RunAsUser), RunAsGroup: ptrCopy(sc.RunAsGroup), RunAsNonRoot: ptrCopy(sc.RunAsNonRoot),
			ReadOnlyRootFilesystem: ptrCopy(sc.ReadOnlyRootFilesystem), Privileged: ptrCopy(sc.Privileged),
			AllowPrivilegeEscalation: ptrCopy(sc.AllowPrivilegeEscalation), SeccompProfile: seccompToPB(sc.SeccompProfile),
		}
		if caps := sc.Capabilities; caps != nil {
			out.SecurityContext.Capabilities = &pb.Capabilities{}
			for _, a := range caps.Add {
				out.SecurityContext.Capabilities.Add = append(out.SecurityContext.Capabilities.Add, string(a))
			}
			for _, d := range caps.Drop {
				out.SecurityContext.Capabilities.Drop = append(out.SecurityContext.Capabilities.Drop, string(d))
			}
		}
	}
	if l := c.Lifecycle; l != nil {
		out.Lifecycle = &pb.Lifecycle{PostStart: handlerToPB(l.PostStart), PreStop: handlerToPB(l.PreStop)}
	}
}

func containerExtrasFromPB(c *pb.Container, out *corev1.Container) {
	out.StdinOnce = c.GetStdinOnce()
	if sc := c.GetSecurityContext(); sc != nil {
		out.SecurityContext = &corev1.SecurityContext{
			RunAsUser: ptrCopy(sc.RunAsUser), RunAsGroup: ptrCopy(sc.RunAsGroup), RunAsNonRoot: ptrCopy(sc.RunAsNonRoot),
			ReadOnlyRootFilesystem: ptrCopy(sc.ReadOnlyRootFilesystem), Privileged: ptrCopy(sc.Privileged),
			AllowPrivilegeEscalation: ptrCopy(sc.AllowPrivilegeEscalation), SeccompProfile: seccompFromPB(sc.GetSeccompProfile()),
		}
		if caps := sc.GetCapabilities(); caps != nil {
			out.SecurityContext.Capabilities = &corev1.Capabilities{}
			for _, a := range caps.GetAdd() {
				out.SecurityContext.Capabilities.Add = append(out.SecurityContext.Capabilities.Add, corev1.Capability(a))
			}
			for _, d := range caps.GetDrop() {
				out.SecurityContext.Capabilities.Drop = append(out.SecurityContext.Capabilities.Drop, corev1.Capability(d))
			}
		}
	}
	if l := c.GetLifecycle(); l != nil {
		out.Lifecycle = &corev1.Lifecycle{PostStart: handlerFromPB(l.GetPostStart()), PreStop: handlerFromPB(l.GetPreStop())}
	}
}

func seccompToPB(p *corev1.SeccompProfile) *pb.SeccompProfile {
	if p == nil {
		return nil
	}
	out := &pb.SeccompProfile{Type: string(p.Type)}
	if p.LocalhostProfile != nil {
		out.LocalhostProfile = *p.LocalhostProfile
	}
	return out
}

func seccompFromPB(p *pb.SeccompProfile) *corev1.SeccompProfile {
	if p == nil {
		return nil
	}
	out := &corev1.SeccompProfile{Type: corev1.SeccompProfileType(p.GetType())}
	if lp := p.GetLocalhostProfile(); lp != "" {
		out.LocalhostProfile = &lp
	}
	return out
}

// handlerToPB reuses the probe's conversion for the actions both have.
func handlerToPB(h *corev1.LifecycleHandler) *pb.LifecycleHandler {
	if h == nil {
		return nil
	}
	p := probeToPB(&corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: h.Exec, HTTPGet: h.HTTPGet, TCPSocket: h.TCPSocket}})
	out := &pb.LifecycleHandler{Exec: p.GetExec(), HttpGet: p.GetHttpGet(), TcpSocket: p.GetTcpSocket()}
	if h.Sleep != nil {
		s := h.Sleep.Seconds
		out.SleepSeconds = &s
	}
	return out
}

func handlerFromPB(h *pb.LifecycleHandler) *corev1.LifecycleHandler {
	if h == nil {
		return nil
	}
	p := probeFromPB(&pb.Probe{Exec: h.GetExec(), HttpGet: h.GetHttpGet(), TcpSocket: h.GetTcpSocket()})
	out := &corev1.LifecycleHandler{Exec: p.Exec, HTTPGet: p.HTTPGet, TCPSocket: p.TCPSocket}
	if h.SleepSeconds != nil {
		out.Sleep = &corev1.SleepAction{Seconds: h.GetSleepSeconds()}
	}
	return out
}
