package binder

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

const (
	zoneKey = "topology.kubernetes.io/zone"
	hostKey = "kubernetes.io/hostname"
)

func zoneNode(name, zone string) *pb.Node {
	n := node(name, "4", true)
	n.Metadata.Labels = map[string]string{hostKey: name, zoneKey: zone}
	return n
}

// antiWeb labels the pod app=web and forbids other app=web pods in the same key domain.
func antiWeb(key string) func(*pb.Pod) {
	return func(p *pb.Pod) {
		p.Metadata.Labels = map[string]string{"app": "web"}
		p.Spec.Affinity = &pb.Affinity{PodAntiAffinity: &pb.PodAffinity{Required: []*pb.PodAffinityTerm{{
			LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TopologyKey: key,
		}}}}
	}
}

func spreadZones(p *pb.Pod) {
	p.Metadata.Labels = map[string]string{"app": "spread"}
	p.Spec.TopologySpreadConstraints = []*pb.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: zoneKey, WhenUnsatisfiable: "DoNotSchedule",
		LabelSelector: &pb.LabelSelector{MatchLabels: map[string]string{"app": "spread"}},
	}}
}

// viewing returns a binder whose commit view is fed by its watches, as Run does.
func (h *harness) viewing(id string) *Service {
	s := h.service(id)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.watchView(ctx) }()
	h.t.Cleanup(func() { cancel(); <-done })
	return s
}

// Two binders (stale schedulers' decisions, all at once) never commit what the inter-pod constraints
// forbid: the commit check re-runs the filters on a view that holds every earlier commit.
func TestCommitCheckUnderConcurrentDecisions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*pb.Pod)
		nodes []string // decision per pod
		want  int      // pods bound
	}{
		{"anti-affinity on one host", antiWeb(hostKey), []string{"a1", "a1", "a1"}, 1},
		{"anti-affinity on zone, different hosts", antiWeb(zoneKey), []string{"a1", "a2", "a1", "a2"}, 1},
		// Zone b is empty, so zone a may hold one spread pod (skew 1), not two.
		{"spread maxSkew 1 across zones", spreadZones, []string{"a1", "a2", "a1", "a2"}, 1},
		{"no constraints: all fit", func(*pb.Pod) {}, []string{"a1", "a2", "a1", "a2"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t)
			for _, n := range []*pb.Node{zoneNode("a1", "a"), zoneNode("a2", "a"), zoneNode("b1", "b")} {
				h.addNode(n)
			}
			binders := []*Service{h.viewing("b1"), h.viewing("b2")}
			bustest.Eventually(t, 5*time.Second, func() bool {
				for _, s := range binders {
					if snap, _ := s.view.cache.Snapshot(); snap.NumNodes() != 3 {
						return false
					}
				}
				return true
			}, "binder views saw the 3 nodes")
			var pods []*pb.Pod
			for i := range tc.nodes {
				p := pod("u"+string(rune('0'+i)), "p"+string(rune('0'+i)), "100m", tc.mod)
				h.addPod(p)
				pods = append(pods, p)
			}
			var wg sync.WaitGroup
			for i, p := range pods {
				wg.Add(1)
				go func() {
					defer wg.Done()
					md := p.GetMetadata()
					if err := binders[i%len(binders)].decide(context.Background(), decision(md.GetUid(), md.GetName(), tc.nodes[i]), uint64(i+1)); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			bound := map[string]string{}
			for _, p := range pods {
				if n := h.getPod(p.GetMetadata().GetName()).GetSpec().GetNodeName(); n != "" {
					bound[p.GetMetadata().GetName()] = n
				}
			}
			if len(bound) != tc.want {
				t.Errorf("bound %v; want %d pod(s) bound", bound, tc.want)
			}
			if got := len(h.msgs(bus.StreamPods, bus.SubjPodPendingAll)); got != len(pods)-tc.want {
				t.Errorf("%d refusals; want %d", got, len(pods)-tc.want)
			}
		})
	}
}

// A placed pod's required anti-affinity also binds pods that have no constraints of their own
// (symmetry): the commit of a matching pod in its domain is refused, one elsewhere goes through.
func TestCommitCheckHonoursPlacedAntiAffinity(t *testing.T) {
	h := setup(t)
	for _, n := range []*pb.Node{zoneNode("a1", "a"), zoneNode("a2", "a")} {
		h.addNode(n)
	}
	s := h.viewing("b1")
	web := func(p *pb.Pod) { p.Metadata.Labels = map[string]string{"app": "web"} }
	guard, same, other := pod("u0", "guard", "100m", antiWeb(hostKey)), pod("u1", "same", "100m", web), pod("u2", "other", "100m", web)
	for _, p := range []*pb.Pod{guard, same, other} {
		h.addPod(p)
	}
	ctx := context.Background()
	if err := s.decide(ctx, decision("u0", "guard", "a1"), 1); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 5*time.Second, func() bool {
		snap, _ := s.view.cache.Snapshot()
		n := snap.Get("a1")
		return n != nil && len(n.PodsWithRequiredAntiAffinity) == 1
	}, "the binder's view holds the guard on a1")
	for i, d := range []*pb.SchedulingDecision{decision("u1", "same", "a1"), decision("u2", "other", "a2")} {
		if err := s.decide(ctx, d, uint64(i+2)); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"guard": "a1", "same": "", "other": "a2"} {
		if got := h.getPod(name).GetSpec().GetNodeName(); got != want {
			t.Errorf("%s bound to %q; want %q", name, got, want)
		}
	}
}
