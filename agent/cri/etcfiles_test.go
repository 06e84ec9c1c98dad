package cri

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestHostsFile(t *testing.T) {
	const head = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
	tests := []struct {
		name      string
		pod       string
		spec      *pb.PodSpec
		want      string
		wantHost  string
		wantDomin string
	}{
		{"plain", "web-1", &pb.PodSpec{}, head + "10.244.1.5\tweb-1\n", "web-1", ""},
		{"hostname and subdomain", "web-1", &pb.PodSpec{Hostname: "h", Subdomain: "s"},
			head + "10.244.1.5\th.s.ns.svc.cluster.local\th\n", "h", "s.ns.svc.cluster.local"},
		{"host aliases", "web-1", &pb.PodSpec{HostAliases: []*pb.HostAlias{
			{Ip: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}, {Ip: "10.9.9.9"}}},
			head + "10.244.1.5\tweb-1\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n", "web-1", ""},
		{"long name cut to 63", "a123456789b123456789c123456789d123456789e123456789f123456789ab-cd", &pb.PodSpec{},
			head + "10.244.1.5\ta123456789b123456789c123456789d123456789e123456789f123456789ab\n",
			"a123456789b123456789c123456789d123456789e123456789f123456789ab", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, domain := podHostname(tt.pod, "ns", tt.spec)
			if host != tt.wantHost || domain != tt.wantDomin {
				t.Errorf("podHostname = %q, %q; want %q, %q", host, domain, tt.wantHost, tt.wantDomin)
			}
			got := string(hostsFile([]string{"10.244.1.5"}, host, domain, tt.spec.GetHostAliases()))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("hosts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseResolvConf(t *testing.T) {
	got := parseResolvConf([]byte("# c\nnameserver 127.0.0.53\nnameserver 10.0.0.2\ndomain a.example\nsearch b.example c.example\noptions edns0 trust-ad\n"))
	want := resolvConfig{nameservers: []string{"127.0.0.53", "10.0.0.2"}, searches: []string{"b.example", "c.example"},
		options: []string{"edns0", "trust-ad"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(resolvConfig{})); diff != "" {
		t.Errorf("parse (-want +got):\n%s", diff)
	}
	if r := got.reachable(); !cmp.Equal(r.nameservers, []string{"10.0.0.2"}) {
		t.Errorf("reachable nameservers = %v, want the non-loopback one", r.nameservers)
	}
}

func TestPodResolvConf(t *testing.T) {
	host := resolvConfig{nameservers: []string{"10.0.0.2"}, searches: []string{"corp.example"}, options: []string{"edns0"}}
	ndots := "2"
	tests := []struct {
		name    string
		spec    *pb.PodSpec
		want    string
		wantErr error
	}{
		{"default policy is ClusterFirst", &pb.PodSpec{},
			"search ns.svc.cluster.local svc.cluster.local cluster.local corp.example\nnameserver 10.0.0.2\noptions ndots:5\n", nil},
		{"Default is the host's", &pb.PodSpec{DnsPolicy: "Default"},
			"search corp.example\nnameserver 10.0.0.2\noptions edns0\n", nil},
		{"host network falls back to Default", &pb.PodSpec{DnsPolicy: "ClusterFirst", HostNetwork: true},
			"search corp.example\nnameserver 10.0.0.2\noptions edns0\n", nil},
		{"dnsConfig merged", &pb.PodSpec{DnsPolicy: "ClusterFirst", DnsConfig: &pb.PodDNSConfig{
			Nameservers: []string{"1.1.1.1", "10.0.0.2"}, Searches: []string{"x.example"},
			Options: []*pb.PodDNSConfigOption{{Name: "ndots", Value: &ndots}, {Name: "single-request"}}}},
			"search ns.svc.cluster.local svc.cluster.local cluster.local corp.example x.example\nnameserver 10.0.0.2\nnameserver 1.1.1.1\noptions ndots:2 single-request\n", nil},
		{"None takes dnsConfig only", &pb.PodSpec{DnsPolicy: "None", DnsConfig: &pb.PodDNSConfig{Nameservers: []string{"9.9.9.9"}}},
			"nameserver 9.9.9.9\n", nil},
		{"at most three nameservers", &pb.PodSpec{DnsPolicy: "None", DnsConfig: &pb.PodDNSConfig{Nameservers: []string{"1.0.0.1", "1.0.0.2", "1.0.0.3", "1.0.0.4"}}},
			"nameserver 1.0.0.1\nnameserver 1.0.0.2\nnameserver 1.0.0.3\n", nil},
		{"None without dnsConfig", &pb.PodSpec{DnsPolicy: "None"}, "", ErrDNSConfig},
		{"unknown policy", &pb.PodSpec{DnsPolicy: "Sometimes"}, "", ErrDNSConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := podResolvConf(host, "ns", tt.spec)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("resolv.conf (-want +got):\n%s", diff)
			}
		})
	}
}
