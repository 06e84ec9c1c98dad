package binder

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A decision is a proposal: the binder binds the stored pod, only to a node the stored pod's
// nodeSelector, required node affinity and tolerations allow, and never releases a reservation that
// another pod holds under the uid a decision names. A refused decision sends the pod back to the
// schedulers; honest decisions still bind.
func TestForgedDecisionsRefused(t *testing.T) {
	ssd := func(p *pb.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }
	zone2 := func(p *pb.Pod) {
		p.Spec.Affinity = &pb.Affinity{NodeAffinity: &pb.NodeAffinity{Required: &pb.NodeSelector{Terms: []*pb.NodeSelectorTerm{
			{MatchExpressions: []*pb.NodeSelectorRequirement{{Key: "zone", Operator: "In", Values: []string{"z2"}}}}}}}}
	}
	tolerant := func(p *pb.Pod) {
		p.Spec.Tolerations = []*pb.Toleration{{Key: "dedicated", Operator: "Equal", Value: "gpu", Effect: "NoSchedule"}}
	}
	tests := []struct {
		name    string
		pod     *pb.Pod
		node    string
		carried func(*pb.Pod) // applied to the body the decision carries (nil: no body)
		refused bool
	}{
		{name: "carried body without the stored nodeSelector", pod: pod("u1", "web", "100m", ssd), node: "n1",
			carried: func(p *pb.Pod) { p.Spec.NodeSelector = nil }, refused: true},
		{name: "node outside the required node affinity", pod: pod("u1", "web", "100m", zone2), node: "n1", refused: true},
		{name: "untolerated NoSchedule taint", pod: pod("u1", "web", "100m"), node: "gpu", refused: true},
		{name: "honest: nodeSelector matches", pod: pod("u1", "web", "100m", ssd), node: "ssd"},
		{name: "honest: affinity matches", pod: pod("u1", "web", "100m", zone2), node: "ssd"},
		{name: "honest: taint tolerated", pod: pod("u1", "web", "100m", tolerant), node: "gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t)
			h.addNode(node("n1", "1", true))
			ssdNode := node("ssd", "1", true)
			ssdNode.Metadata.Labels = map[string]string{"disk": "ssd", "zone": "z2"}
			h.addNode(ssdNode)
			gpu := node("gpu", "1", true)
			gpu.Spec = &pb.NodeSpec{Taints: []*pb.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}}
			h.addNode(gpu)
			rev := h.addPod(tt.pod)
			before := metrics.Counter("binder.refused_decisions")
			h.run("b1")
			d := decision("u1", "web", tt.node)
			d.PodRevision = rev
			if tt.carried != nil {
				d.Pod = proto.Clone(tt.pod).(*pb.Pod)
				tt.carried(d.Pod)
			}
			h.publishDecision(d, "d1")
			h.quiesce()

			got, want := h.getPod("web").GetSpec().GetNodeName(), tt.node
			if tt.refused {
				want = ""
			}
			if got != want {
				t.Errorf("bound to %q, want %q", got, want)
			}
			if sel := h.getPod("web").GetSpec().GetNodeSelector(); !cmp.Equal(sel, tt.pod.GetSpec().GetNodeSelector(), cmpopts.EquateEmpty()) {
				t.Errorf("stored nodeSelector became %v", sel)
			}
			refused := metrics.Counter("binder.refused_decisions") - before
			requeued := len(h.msgs(bus.StreamPods, bus.SubjPodPending))
			if tt.refused && (refused != 1 || requeued != 1 || len(h.allocPods(tt.node)) != 0) {
				t.Errorf("refused %d, requeued %d, alloc/%s %v; want refused and requeued once, nothing reserved", refused, requeued, tt.node, h.allocPods(tt.node))
			}
			if !tt.refused && (refused != 0 || requeued != 0) {
				t.Errorf("an honest decision was refused (%d) or requeued (%d)", refused, requeued)
			}
		})
	}
}

// A decision that names the uid of another pod, bound elsewhere by name, leaves that pod's
// reservation alone.
func TestDecisionWithForeignUIDKeepsTheReservation(t *testing.T) {
	h := setup(t)
	h.addNode(node("n1", "1", true))
	other := pod("u9", "other", "100m", boundTo("n1"))
	h.addPod(other)
	if res, _, err := h.service("pre").reserve(context.Background(), "n1", other); err != nil || !res.ok() {
		t.Fatalf("reserve: %v %v", res, err)
	}
	h.addPod(pod("u1", "web", "100m"))
	before := metrics.Counter("binder.refused.foreign_uid")
	h.run("b1")
	h.publishDecision(decision("u9", "web", "n1"), "forged")
	h.quiesce()
	if got := h.allocPods("n1"); !got["u9"] || len(got) != 1 {
		t.Errorf("alloc/n1 holds %v, want u9's reservation kept", got)
	}
	if n := h.getPod("web").GetSpec().GetNodeName(); n != "" {
		t.Errorf("web bound to %s by a decision for another uid", n)
	}
	if got := metrics.Counter("binder.refused.foreign_uid") - before; got != 1 {
		t.Errorf("binder.refused.foreign_uid counted %d, want 1", got)
	}
}
