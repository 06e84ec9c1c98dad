package podutil

import (
	"testing"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestConstraintGroup(t *testing.T) {
	sel := func(app string) *pb.LabelSelector {
		return &pb.LabelSelector{MatchLabels: map[string]string{"app": app, "tier": "web"}}
	}
	spread := func(ns, name, app string) *pb.Pod {
		return &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
			Spec: &pb.PodSpec{TopologySpreadConstraints: []*pb.TopologySpreadConstraint{{MaxSkew: 1,
				TopologyKey: "zone", WhenUnsatisfiable: "DoNotSchedule", LabelSelector: sel(app)}}}}
	}
	anti := func(ns, name, app string) *pb.Pod {
		return &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: ns, Name: name},
			Spec: &pb.PodSpec{Affinity: &pb.Affinity{PodAntiAffinity: &pb.PodAffinity{Required: []*pb.PodAffinityTerm{{
				LabelSelector: sel(app), TopologyKey: "kubernetes.io/hostname"}}}}}}
	}
	plain := &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: "a", Name: "p"}, Spec: &pb.PodSpec{
		NodeSelector: map[string]string{"disk": "ssd"},
		Affinity:     &pb.Affinity{NodeAffinity: &pb.NodeAffinity{}}}}

	if g := ConstraintGroup(plain); g != "" {
		t.Errorf("pod without inter-pod constraints: group %q, want none", g)
	}
	tests := []struct {
		name string
		a, b *pb.Pod
		same bool
	}{
		{"replicas of one spread workload", spread("a", "p1", "x"), spread("a", "p2", "x"), true},
		{"replicas of one anti-affinity workload", anti("a", "p1", "x"), anti("a", "p2", "x"), true},
		{"another namespace", spread("a", "p1", "x"), spread("b", "p1", "x"), false},
		{"another selector", spread("a", "p1", "x"), spread("a", "p1", "y"), false},
		{"spread against anti-affinity", spread("a", "p1", "x"), anti("a", "p1", "x"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ga, gb := ConstraintGroup(tt.a), ConstraintGroup(tt.b)
			if ga == "" || gb == "" {
				t.Fatalf("constrained pods without a group: %q, %q", ga, gb)
			}
			if (ga == gb) != tt.same {
				t.Errorf("same group = %v, want %v", ga == gb, tt.same)
			}
		})
	}
	// Map order must not matter: many selector labels, marshalled again and again.
	want := ConstraintGroup(spread("a", "p", "x"))
	for range 50 {
		if g := ConstraintGroup(spread("a", "p", "x")); g != want {
			t.Fatal("group depends on map order")
		}
	}
}
