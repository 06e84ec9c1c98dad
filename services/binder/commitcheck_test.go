package binder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

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

// zonedBinders registers nodes a1 and a2 in zone a and b1 in zone b, and returns n binders whose views
// hold them.
func (h *harness) zonedBinders(n int) []*Service {
	h.t.Helper()
	for _, node := range []*pb.Node{zoneNode("a1", "a"), zoneNode("a2", "a"), zoneNode("b1", "b")} {
		h.addNode(node)
	}
	var binders []*Service
	for i := range n {
		binders = append(binders, h.viewing(fmt.Sprintf("b%d", i+1)))
	}
	bustest.Eventually(h.t, 5*time.Second, func() bool {
		for _, s := range binders {
			if s.view.snapshot().NumNodes() != 3 {
				return false
			}
		}
		return true
	}, "binder views saw the 3 nodes")
	return binders
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
			binders := h.zonedBinders(2)
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
		n := s.view.snapshot().Get("a1")
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

// Decisions handed over together (handleCheckedDecisions) are checked as one group: each against the
// commits before it, the group's own included, so a group never commits what the constraints forbid,
// alone or racing another binder's groups.
func TestCheckedDecisionsInGroups(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mod      func(*pb.Pod)
		nodes    []string // decision per pod
		binders  int      // pods go to the binders in turn, each binder's share as one group
		want     int      // pods bound
		wantPeak int      // of them, at most this many on a1
	}{
		{"anti-affinity on one host, one group", antiWeb(hostKey), []string{"a1", "a1", "a1"}, 1, 1, 1},
		{"anti-affinity on zone, one group", antiWeb(zoneKey), []string{"a1", "a2", "b1", "a1"}, 1, 2, 1},
		{"spread maxSkew 1, one group", spreadZones, []string{"a1", "a2", "b1", "b1"}, 1, 3, 1},
		{"anti-affinity on one host, two binders", antiWeb(hostKey), []string{"a1", "a1", "a1", "a1", "a2", "a2"}, 2, 2, 1},
		{"no constraints: all fit", func(*pb.Pod) {}, []string{"a1", "a2", "a1", "a2"}, 2, 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t)
			binders := h.zonedBinders(tc.binders)
			groups := make([][]*bus.Msg, len(binders))
			var pods []*pb.Pod
			for i, node := range tc.nodes {
				p := pod(fmt.Sprintf("u%d", i), fmt.Sprintf("p%d", i), "100m", tc.mod)
				rev := h.addPod(p)
				pods = append(pods, p)
				d := decision(p.GetMetadata().GetUid(), p.GetMetadata().GetName(), node)
				d.Pod, d.PodRevision = proto.Clone(p).(*pb.Pod), rev
				data, err := proto.Marshal(d)
				if err != nil {
					t.Fatal(err)
				}
				groups[i%len(binders)] = append(groups[i%len(binders)], &bus.Msg{Subject: bus.SubjPodScheduled, Data: data, StreamSeq: uint64(i + 1)})
			}
			var wg sync.WaitGroup
			for i, s := range binders {
				wg.Go(func() {
					for j, err := range s.handleCheckedDecisions(context.Background(), groups[i]) {
						if err != nil {
							t.Errorf("binder %d, decision %d: %v", i, j, err)
						}
					}
				})
			}
			wg.Wait()
			bound, onA1 := 0, 0
			for _, p := range pods {
				switch h.getPod(p.GetMetadata().GetName()).GetSpec().GetNodeName() {
				case "":
				case "a1":
					bound++
					onA1++
				default:
					bound++
				}
			}
			if bound != tc.want || onA1 > tc.wantPeak {
				t.Errorf("bound %d (%d on a1); want %d, at most %d on a1", bound, onA1, tc.want, tc.wantPeak)
			}
			if got := len(h.msgs(bus.StreamPods, bus.SubjPodPendingAll)); got != len(pods)-tc.want {
				t.Errorf("%d refusals; want %d", got, len(pods)-tc.want)
			}
		})
	}
}

// A binder that stops between a group's tentative reservations and the token leaves them behind; the
// redelivered decisions find their own and confirm them (or refuse where the constraints say so): each
// pod ends bound once or back with the schedulers, one per host, and no reservation is left over.
func TestCheckedGroupCrashBeforeToken(t *testing.T) {
	h := setup(t)
	nodes := []string{"a1", "a2", "b1"}
	for _, n := range []*pb.Node{zoneNode("a1", "a"), zoneNode("a2", "a"), zoneNode("b1", "b")} {
		h.addNode(n)
	}
	var mu sync.Mutex
	crashes := 0
	h.run("b1", func(s *Service) {
		s.beforeToken = func() error {
			mu.Lock()
			defer mu.Unlock()
			if crashes == 0 {
				crashes++
				return errors.New("simulated crash before the token")
			}
			return nil
		}
	})
	var pods []*pb.Pod
	var futures []jetstream.PubAckFuture
	batch := bus.NewBatcher(h.conn.JS, "scheduler/test")
	for i, node := range []string{"a1", "a1", "a2", "a2", "b1", "b1"} {
		p := pod(fmt.Sprintf("u%d", i), fmt.Sprintf("p%d", i), "100m", antiWeb(hostKey))
		rev := h.addPod(p)
		pods = append(pods, p)
		d := decision(p.GetMetadata().GetUid(), p.GetMetadata().GetName(), node)
		d.Pod, d.PodRevision = proto.Clone(p).(*pb.Pod), rev
		f, err := batch.PublishAsync(bus.SubjPodScheduled, d, bus.Meta{PodUID: d.GetUid(), Key: "default/" + d.GetName()})
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := bus.Wait(context.Background(), futures...); err != nil {
		t.Fatal(err)
	}
	h.quiesce()
	mu.Lock()
	if crashes == 0 {
		t.Error("no group went through the crash seam")
	}
	mu.Unlock()
	perNode := map[string]int{}
	for _, p := range pods {
		if n := h.getPod(p.GetMetadata().GetName()).GetSpec().GetNodeName(); n != "" {
			perNode[n]++
		}
	}
	if len(perNode) != 3 || perNode["a1"] != 1 || perNode["a2"] != 1 || perNode["b1"] != 1 {
		t.Errorf("bound per node %v; want one on each of a1, a2, b1", perNode)
	}
	h.checkFinal(nodes, pods)
}

// A checked decision whose binding lost the pod's compare-and-set is judged again; if the constraints
// refuse it then, the reservation it made and confirmed goes with the refusal. Another decision's
// refusal leaves that reservation alone: it may be binding.
func TestRefusalWithdrawsOnlyItsOwnReservation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		retry    string // the refused decision's id
		wantKept bool
	}{
		{"the decision that made it", "s1-7", false},
		{"another decision", "s2-9", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t)
			h.addNode(zoneNode("a1", "a"))
			s := h.viewing("b1")
			ctx := context.Background()
			x := pod("ux", "x", "100m", antiWeb(hostKey))
			if res, _, err := s.reserveChecked(ctx, "a1", x, "s1-7"); err != nil || res != reservationAdded {
				t.Fatalf("first reservation = %v, %v", res, err)
			}
			// Another app=web pod lands on a1 meanwhile: x's anti-affinity now refuses a1.
			y := pod("uy", "y", "100m", func(p *pb.Pod) { p.Metadata.Labels = map[string]string{"app": "web"} })
			if res, _, err := s.reserve(ctx, "a1", y); err != nil || res != reservationAdded {
				t.Fatalf("reserve y = %v, %v", res, err)
			}
			res, _, err := s.reserveChecked(ctx, "a1", x, tc.retry)
			if err != nil || res != reservationConstraint {
				t.Fatalf("retry = %v, %v; want %v", res, err, reservationConstraint)
			}
			if got := h.allocPods("a1")["ux"]; got != tc.wantKept {
				t.Errorf("x's reservation kept: %v, want %v", got, tc.wantKept)
			}
		})
	}
}
