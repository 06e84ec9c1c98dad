package binder

import (
	"context"
	"testing"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

func priority(v int32) func(*pb.Pod) { return func(p *pb.Pod) { p.Spec.Priority = &v } }

func preemption(node string, victims ...*pb.Pod) *pb.SchedulingDecision {
	d := &pb.SchedulingDecision{Uid: "hi", Namespace: "default", Name: "hi", Unschedulable: true, PodRevision: 1,
		Message: "0/2 nodes are available: 2 Insufficient cpu.", NominatedNode: node}
	for _, v := range victims {
		md := v.GetMetadata()
		d.Victims = append(d.Victims, &pb.PreemptionVictim{Uid: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(), Priority: v.GetSpec().GetPriority()})
	}
	return d
}

// A preemption decision marks the victims and the nomination in the alloc record, records
// nominatedNodeName, and asks the store to delete the victims with reason Preempted, once however often
// it is delivered. A second decision for the same pod on another node (another replica) evicts nothing
// while the first one's victims are still there; once they are gone it may move the nomination. Binding
// drops the nomination.
func TestPreemptionDecision(t *testing.T) {
	h := setup(t)
	ctx := context.Background()
	s := h.service("b1")
	h.addNode(node("n1", "2", true))
	h.addNode(node("n2", "2", true))
	l1 := pod("l1", "l1", "1", boundTo("n1"))
	l2 := pod("l2", "l2", "1", boundTo("n2"))
	same := pod("s2", "s2", "1", boundTo("n2"), priority(100))
	hi := pod("hi", "hi", "2", priority(100))
	for _, p := range []*pb.Pod{l1, l2, same} {
		h.addPod(p)
		if _, _, err := s.reserve(ctx, p.GetSpec().GetNodeName(), p); err != nil {
			t.Fatal(err)
		}
	}
	h.addPod(hi)
	alloc := func(n string) *pb.NodeAllocation {
		a, _, err := ReadAllocation(ctx, h.b.Alloc, n)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	deletes := func() map[string]string { // msg id -> victim uid
		out := map[string]string{}
		for _, m := range h.msgs(bus.StreamPods, bus.SubjPodDelete) {
			cmd := bustest.Decode(t, m, &pb.PodCommand{})
			if cmd.GetReason() != ReasonPreempted || cmd.GetPreconditionUid() != cmd.GetPod().GetMetadata().GetUid() {
				t.Errorf("delete command %v", cmd)
			}
			out[m.Header.Get(bus.HdrMsgID)] = cmd.GetPreconditionUid()
		}
		return out
	}

	// 1. Preempt l1 on n1; a redelivery changes nothing.
	for range 2 {
		if err := s.decide(ctx, preemption("n1", l1), 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.getPod("hi").GetStatus().GetNominatedNodeName(); got != "n1" {
		t.Errorf("nominatedNodeName = %q", got)
	}
	a1 := alloc("n1")
	if a1.GetPods()["l1"].GetPreemptedBy() != "hi" || a1.GetNominated()["hi"] == nil {
		t.Errorf("alloc/n1 = %v", a1)
	}
	if d := deletes(); len(d) != 1 || d["preempt-hi-n1-l1"] != "l1" {
		t.Errorf("delete commands %v", d)
	}
	evs := h.msgs(bus.StreamEvents, bus.SubjEvent("default", "l1"))
	if len(evs) != 1 || bustest.Decode(t, evs[0], &pb.Event{}).GetMessage() != "Preempted by pod hi on node n1" {
		t.Errorf("events on l1: %d", len(evs))
	}

	// 2. Another replica's decision for n2 while l1 is still there: it evicts nothing, even an equal
	// priority pod it should never have named.
	if err := s.decide(ctx, preemption("n2", l2, same), 2); err != nil {
		t.Fatal(err)
	}
	if got := h.getPod("hi").GetStatus().GetNominatedNodeName(); got != "n1" {
		t.Errorf("nomination moved to %q while its victims are still going", got)
	}
	if a2 := alloc("n2"); len(a2.GetNominated()) != 0 || a2.GetPods()["l2"].GetPreemptedBy() != "" {
		t.Errorf("alloc/n2 marked: %v", a2)
	}
	if d := deletes(); len(d) != 1 {
		t.Errorf("delete commands %v", d)
	}

	// 3. l1 is gone; n1 is taken by someone else meanwhile, so a new preemption on n2 goes ahead: it
	// evicts l2 but never the equal-priority s2, and n1's nomination is dropped.
	if err := s.release(ctx, "n1", "l1"); err != nil {
		t.Fatal(err)
	}
	if err := s.decide(ctx, preemption("n2", l2, same), 3); err != nil {
		t.Fatal(err)
	}
	if got := h.getPod("hi").GetStatus().GetNominatedNodeName(); got != "n2" {
		t.Errorf("nominatedNodeName = %q, want n2", got)
	}
	if len(alloc("n1").GetNominated()) != 0 {
		t.Errorf("n1 keeps the nomination")
	}
	if d := deletes(); len(d) != 2 || d["preempt-hi-n2-l2"] != "l2" {
		t.Errorf("delete commands %v", d)
	}
	if alloc("n2").GetPods()["s2"].GetPreemptedBy() != "" {
		t.Errorf("equal priority pod marked")
	}

	// 4. Room made (s2 leaves too), the pod binds on n2: the nomination is gone.
	for _, uid := range []string{"l2", "s2"} {
		if err := s.release(ctx, "n2", uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.decide(ctx, decision("hi", "hi", "n2"), 4); err != nil {
		t.Fatal(err)
	}
	p := h.getPod("hi")
	if p.GetSpec().GetNodeName() != "n2" || p.GetStatus().GetNominatedNodeName() != "" {
		t.Errorf("after binding: node %q nominated %q", p.GetSpec().GetNodeName(), p.GetStatus().GetNominatedNodeName())
	}
	if a := alloc("n2"); len(a.GetNominated()) != 0 || a.GetPods()["hi"] == nil {
		t.Errorf("alloc/n2 after binding = %v", a)
	}
}
