package framework_test

import (
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// The interpod plugins memoise matches per LabelsKey and per term Key, so equal keys must mean
// "matched the same way by every term" and "matches the same pods".
func TestMatchKeys(t *testing.T) {
	labels := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	lk := []struct {
		name string
		a, b func() any
		same bool
	}{
		{"same labels, same namespace", func() any { return framework.LabelsKey("ns", labels("a", "1", "b", "2")) },
			func() any { return framework.LabelsKey("ns", labels("b", "2", "a", "1")) }, true},
		{"other namespace", func() any { return framework.LabelsKey("ns", labels("a", "1")) },
			func() any { return framework.LabelsKey("other", labels("a", "1")) }, false},
		{"other value", func() any { return framework.LabelsKey("ns", labels("a", "1")) },
			func() any { return framework.LabelsKey("ns", labels("a", "2")) }, false},
		{"key/value boundary", func() any { return framework.LabelsKey("ns", labels("a", "b=c")) },
			func() any { return framework.LabelsKey("ns", labels("a=b", "c")) }, false},
		{"no labels", func() any { return framework.LabelsKey("ns", nil) },
			func() any { return framework.LabelsKey("ns", labels()) }, true},
	}
	for _, tt := range lk {
		if got := tt.a() == tt.b(); got != tt.same {
			t.Errorf("LabelsKey %s: equal %v, want %v", tt.name, got, tt.same)
		}
	}

	term := func(group string) *pb.PodAffinity {
		return &pb.PodAffinity{Required: []*pb.PodAffinityTerm{{
			LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{"group": group}}, TopologyKey: "kubernetes.io/hostname"}}}
	}
	key := func(ns, group string) any {
		return framework.CompilePodAffinity(ns, nil, term(group)).RequiredAntiAffinity[0].Key
	}
	tk := []struct {
		name string
		a, b any
		same bool
	}{
		{"same term, same namespace", key("ns", "g1"), key("ns", "g1"), true},
		{"same term, other namespace (implicit namespaces differ)", key("ns", "g1"), key("other", "g1"), false},
		{"other selector", key("ns", "g1"), key("ns", "g2"), false},
	}
	for _, tt := range tk {
		if got := tt.a == tt.b; got != tt.same {
			t.Errorf("term Key %s: equal %v, want %v", tt.name, got, tt.same)
		}
	}
}
