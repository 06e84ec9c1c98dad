package nodepool

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestParseExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/node-pools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if p.Total() != 10 || len(p.Nodes()) != 10 {
		t.Errorf("total %d, nodes %d, want 10", p.Total(), len(p.Nodes()))
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown field", "pools:\n- name: a\n  count: 1\n  cpus: 3\n", "unknown field"},
		{"bad name", "pools:\n- name: A_b\n  count: 1\n", "name"},
		{"duplicate pool", "pools:\n- name: a\n- name: a\n", "duplicate pool"},
		{"negative count", "pools:\n- name: a\n  count: -1\n", "count"},
		{"bad quantity", "pools:\n- name: a\n  capacity: {cpu: lots}\n", "capacity.cpu"},
		{"bad label", "pools:\n- name: a\n  labels: {'-x': y}\n", "labels"},
		{"bad zone", "pools:\n- name: a\n  zones: ['zone a']\n", "zones"},
		{"bad effect", "pools:\n- name: a\n  taints: ['k=v:Never']\n", "effect"},
		{"taint without effect", "pools:\n- name: a\n  taints: ['k=v']\n", "taints"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
}

func TestNodes(t *testing.T) {
	p, err := Parse([]byte(`pools:
- name: gpu
  count: 4
  capacity: {cpu: "16", example.com/gpu: "2"}
  labels: {team: ml}
  zones: [za, zb]
  taints: ["dedicated=gpu:NoSchedule", "spot:PreferNoSchedule"]
`))
	if err != nil {
		t.Fatal(err)
	}
	nodes := p.Nodes()
	var names, zones []string
	for _, n := range nodes {
		names = append(names, n.Name)
		zones = append(zones, n.Labels[LabelZone])
	}
	if d := cmp.Diff([]string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"}, names); d != "" {
		t.Errorf("names (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"za", "zb", "za", "zb"}, zones); d != "" {
		t.Errorf("zones (-want +got):\n%s", d)
	}
	n := nodes[1]
	wantLabels := map[string]string{"team": "ml", LabelZone: "zb", LabelPool: "gpu", LabelHostname: "gpu-2", LabelOS: "linux", LabelArch: runtime.GOARCH}
	if d := cmp.Diff(wantLabels, n.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	wantCap := map[string]string{"cpu": "16", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi", "example.com/gpu": "2"}
	if d := cmp.Diff(wantCap, n.Capacity); d != "" {
		t.Errorf("capacity (-want +got):\n%s", d)
	}
	wantTaints := []*pb.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}, {Key: "spot", Effect: "PreferNoSchedule"}}
	if d := cmp.Diff(wantTaints, n.Taints, protocmp.Transform()); d != "" {
		t.Errorf("taints (-want +got):\n%s", d)
	}
	a := n.AgentConfig()
	if a.Node != "gpu-2" || a.CPU != "16" || a.Memory != "32Gi" || a.MaxPods != 110 || a.Storage != "100Gi" ||
		a.Extended["example.com/gpu"] != "2" || len(a.Taints) != 2 || a.Labels[LabelZone] != "zb" {
		t.Errorf("agent config %+v", a)
	}
}

func TestParseTaintsAndLabels(t *testing.T) {
	taints := []struct {
		in      string
		want    []*pb.Taint
		wantErr bool
	}{
		{in: "", want: nil},
		{in: "a=b:NoSchedule", want: []*pb.Taint{{Key: "a", Value: "b", Effect: "NoSchedule"}}},
		{in: "example.com/a:NoExecute, b=:PreferNoSchedule", want: []*pb.Taint{{Key: "example.com/a", Effect: "NoExecute"}, {Key: "b", Effect: "PreferNoSchedule"}}},
		{in: "a=b", wantErr: true},
		{in: "a=b:Sometimes", wantErr: true},
		{in: "a b=c:NoSchedule", wantErr: true},
		{in: "a=b c:NoSchedule", wantErr: true},
		{in: "a:NoSchedule,a=x:NoSchedule", wantErr: true},
	}
	for _, tt := range taints {
		got, err := ParseTaints(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseTaints(%q) err = %v", tt.in, err)
			continue
		}
		if d := cmp.Diff(tt.want, got, protocmp.Transform()); !tt.wantErr && d != "" {
			t.Errorf("ParseTaints(%q) (-want +got):\n%s", tt.in, d)
		}
	}
	labels, err := ParseLabels("a=1, example.com/b=two,c")
	if d := cmp.Diff(map[string]string{"a": "1", "example.com/b": "two", "c": ""}, labels); err != nil || d != "" {
		t.Errorf("ParseLabels: %v (-want +got):\n%s", err, d)
	}
	if _, err := ParseLabels("a=not ok"); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid label value accepted: %v", err)
	}
}

func TestRegister(t *testing.T) {
	_, conn := bustest.Start(t)
	ctx := context.Background()
	b, err := bus.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	p := Pools{Pools: []Pool{
		{Name: "general", Count: 50, Zones: []string{"a", "b"}},
		{Name: "gpu", Count: 3, Capacity: map[string]string{"example.com/gpu": "2"}, Taints: []string{"dedicated=gpu:NoSchedule"}},
	}}
	if err := Register(ctx, conn, p); err != nil {
		t.Fatalf("Register: %v", err)
	}
	var n pb.Node
	rev, err := bus.Get(ctx, b.Nodes, bus.NodeKey("gpu-3"), &n)
	if err != nil {
		t.Fatal(err)
	}
	if !podutil.NodeIsReady(&n) || n.GetMetadata().GetUid() == "" || n.GetStatus().GetAllocatable()["example.com/gpu"] != "2" ||
		len(n.GetSpec().GetTaints()) != 1 || n.GetMetadata().GetAnnotations()[podutil.AnnotationAgent] != "" {
		t.Errorf("registered node %v", &n)
	}
	// Idempotent: a second run succeeds and leaves existing nodes alone.
	if err := Register(ctx, conn, p); err != nil {
		t.Fatalf("second Register: %v", err)
	}
	if rev2, err := bus.Get(ctx, b.Nodes, bus.NodeKey("gpu-3"), &n); err != nil || rev2 != rev {
		t.Errorf("node rewritten: rev %d -> %d (%v)", rev, rev2, err)
	}
	keys, err := b.Nodes.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for range keys.Keys() {
		count++
	}
	if count != 53 {
		t.Errorf("%d nodes, want 53", count)
	}
	if err := Register(ctx, conn, Pools{Pools: []Pool{{Name: "Bad"}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid pools: %v", err)
	}
}
