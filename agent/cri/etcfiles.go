package cri

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Every pod gets its own /etc/hosts, /etc/resolv.conf and /etc/hostname, written once its IP is known
// into StateDir/etc/<pod uid>/ and bind-mounted into each of its containers, as the kubelet and
// containerd's CRI plugin do. They are mounted read-write (an application may edit its hosts file)
// unless the container's root filesystem is read-only.
//
// DNS: podbus runs no cluster DNS server, so ClusterFirst (the default) gives the host's nameservers
// with Kubernetes' search path (<ns>.svc.cluster.local svc.cluster.local cluster.local, then the host's)
// and ndots:5: a program sees the resolver configuration it would see in a cluster, and names outside
// the cluster resolve through the host's servers. Default is the host's file as is; None only the pod's
// dnsConfig, which the other policies merge in as the kubelet does.

// ClusterDomain is the DNS domain of the cluster in pods' search paths and FQDNs.
const ClusterDomain = "cluster.local"

// Host resolver configurations, in the order they are tried: the first with a nameserver a pod can
// reach (not loopback, which is the pod's own) is used; systemd-resolved's stub listens on loopback.
var hostResolvConfs = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

// Limits the kubelet enforces on a pod's resolv.conf (glibc's).
const (
	maxNameservers = 3
	maxSearches    = 32
)

// Errors of the pod's DNS configuration.
var ErrDNSConfig = errors.New("invalid pod DNS configuration")

func (r *Runtime) etcDir(uid string) string { return filepath.Join(r.cfg.StateDir, "etc", uid) }

// podSettings is the part of the pod spec its containers need beyond their own spec, kept in the
// sandbox record so that CreateContainer (which sees one container) and a restarted agent have it.
func podSettings(pod *pb.Pod) []byte {
	s := pod.GetSpec()
	b, _ := proto.Marshal(&pb.PodSpec{
		Hostname: s.GetHostname(), Subdomain: s.GetSubdomain(), DnsPolicy: s.GetDnsPolicy(),
		DnsConfig: s.GetDnsConfig(), HostAliases: s.GetHostAliases(), SecurityContext: s.GetSecurityContext(),
		HostNetwork: s.GetHostNetwork(),
	})
	return b
}

func (rec *sandboxRecord) settings() *pb.PodSpec {
	var s pb.PodSpec
	_ = proto.Unmarshal(rec.Spec, &s) // written by podSettings; an old record has none
	return &s
}

// podHostname is the pod's host name and domain as the kubelet derives them: spec.hostname or the pod
// name (cut to 63 characters), and <subdomain>.<namespace>.svc.<cluster domain> with a subdomain.
func podHostname(name, namespace string, s *pb.PodSpec) (hostname, domain string) {
	hostname = name
	if h := s.GetHostname(); h != "" {
		hostname = h
	}
	if len(hostname) > 63 {
		hostname = strings.TrimRight(hostname[:63], "-.")
	}
	if sub := s.GetSubdomain(); sub != "" {
		domain = sub + "." + namespace + ".svc." + ClusterDomain
	}
	return hostname, domain
}

// hostsFile is the kubelet's managed hosts file: localhost lines, the pod's IPs with its names, then
// the pod's hostAliases.
func hostsFile(ips []string, hostname, domain string, aliases []*pb.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n")
	for _, ip := range ips {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	if len(aliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range aliases {
			if len(a.GetHostnames()) > 0 {
				fmt.Fprintf(&b, "%s\t%s\n", a.GetIp(), strings.Join(a.GetHostnames(), "\t"))
			}
		}
	}
	return b.Bytes()
}

// resolvConfig is a parsed resolv.conf.
type resolvConfig struct {
	nameservers, searches, options []string
}

func parseResolvConf(b []byte) resolvConfig {
	var rc resolvConfig
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) > 1 {
				rc.nameservers = append(rc.nameservers, f[1])
			}
		case "search", "domain": // the last of them wins, as in glibc
			rc.searches = append([]string(nil), f[1:]...)
		case "options":
			rc.options = append(rc.options, f[1:]...)
		}
	}
	return rc
}

// reachable drops the loopback nameservers: in the pod's netns they are the pod's own.
func (rc resolvConfig) reachable() resolvConfig {
	out := rc
	out.nameservers = slices.DeleteFunc(slices.Clone(rc.nameservers), func(ns string) bool {
		a, err := netip.ParseAddr(ns)
		return err == nil && a.IsLoopback()
	})
	return out
}

// hostResolv reads the first host resolver configuration with a nameserver a pod can reach; if none
// has one, the first readable one (without its loopback servers).
func hostResolv() resolvConfig {
	var first *resolvConfig
	for _, p := range hostResolvConfs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		rc := parseResolvConf(b).reachable()
		if len(rc.nameservers) > 0 {
			return rc
		}
		if first == nil {
			first = &rc
		}
	}
	if first != nil {
		return *first
	}
	return resolvConfig{}
}

// podResolvConf is the pod's resolv.conf for its dnsPolicy and dnsConfig given the host's.
func podResolvConf(host resolvConfig, namespace string, s *pb.PodSpec) ([]byte, error) {
	policy := s.GetDnsPolicy()
	if policy == "" {
		policy = "ClusterFirst"
	}
	if policy == "ClusterFirst" && s.GetHostNetwork() {
		policy = "Default" // as the kubelet: host-network pods use the host's resolver
	}
	var rc resolvConfig
	switch policy {
	case "Default":
		rc = host
	case "ClusterFirst", "ClusterFirstWithHostNet":
		rc.nameservers = host.nameservers
		rc.searches = append([]string{namespace + ".svc." + ClusterDomain, "svc." + ClusterDomain, ClusterDomain}, host.searches...)
		rc.options = []string{"ndots:5"}
	case "None":
		if s.GetDnsConfig() == nil {
			return nil, fmt.Errorf("%w: dnsPolicy None without dnsConfig", ErrDNSConfig)
		}
	default:
		return nil, fmt.Errorf("%w: unknown dnsPolicy %q", ErrDNSConfig, policy)
	}
	if dc := s.GetDnsConfig(); dc != nil {
		rc.nameservers = append(slices.Clone(rc.nameservers), dc.GetNameservers()...)
		rc.searches = append(slices.Clone(rc.searches), dc.GetSearches()...)
		rc.options = mergeOptions(rc.options, dc.GetOptions())
	}
	rc.nameservers = dedupe(rc.nameservers)
	if len(rc.nameservers) > maxNameservers {
		rc.nameservers = rc.nameservers[:maxNameservers]
	}
	rc.searches = dedupe(rc.searches)
	if len(rc.searches) > maxSearches {
		rc.searches = rc.searches[:maxSearches]
	}
	var b bytes.Buffer
	if len(rc.searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(rc.searches, " "))
	}
	for _, ns := range rc.nameservers {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	if len(rc.options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(rc.options, " "))
	}
	return b.Bytes(), nil
}

// mergeOptions adds the pod's options to base, a pod option replacing a base option of the same name.
func mergeOptions(base []string, pod []*pb.PodDNSConfigOption) []string {
	name := func(o string) string { n, _, _ := strings.Cut(o, ":"); return n }
	out := slices.Clone(base)
	for _, o := range pod {
		opt := o.GetName()
		if o.Value != nil {
			opt += ":" + o.GetValue()
		}
		out = slices.DeleteFunc(out, func(b string) bool { return name(b) == o.GetName() })
		out = append(out, opt)
	}
	return out
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// writeEtcFiles writes the pod's hosts, resolv.conf and hostname once its IPs are known.
func (r *Runtime) writeEtcFiles(rec *sandboxRecord) error {
	s := rec.settings()
	hostname, domain := podHostname(rec.Name, rec.Namespace, s)
	resolv, err := podResolvConf(hostResolv(), rec.Namespace, s)
	if err != nil {
		return err
	}
	dir := r.etcDir(rec.PodUID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pod etc files: %w", err)
	}
	for name, content := range map[string][]byte{
		"hosts":       hostsFile(rec.IPs, hostname, domain, s.GetHostAliases()),
		"resolv.conf": resolv,
		"hostname":    []byte(hostname + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return fmt.Errorf("pod etc files: %w", err)
		}
	}
	return nil
}

func (r *Runtime) removeEtcFiles(uid string) error {
	if err := os.RemoveAll(r.etcDir(uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove etc files of pod %s: %w", uid, err)
	}
	return nil
}

// etcMounts bind-mounts the pod's files over the image's; none when they were never written (a
// sandbox from before they existed).
func (r *Runtime) etcMounts(uid string, readOnly bool) []specs.Mount {
	mode := "rw"
	if readOnly {
		mode = "ro"
	}
	var out []specs.Mount
	for _, name := range []string{"hosts", "resolv.conf", "hostname"} {
		src := filepath.Join(r.etcDir(uid), name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		out = append(out, specs.Mount{Destination: "/etc/" + name, Type: "bind", Source: src,
			Options: []string{"rbind", "rprivate", mode}})
	}
	return out
}
