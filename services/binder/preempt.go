package binder

import (
	"context"
	"errors"
	"fmt"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Preemption, as the binder carries it out for an unschedulable decision that names a node and
// victims (the scheduler only proposes, like everything else it decides):
//
//	1. mark: in alloc/<node> (CAS) each victim gets preempted_by=<pod uid> and the pod is listed under
//	   nominated, so every scheduler replica holds the room for it against lower priorities and knows
//	   it waits for those victims (it will not preempt again meanwhile);
//	2. claim: CAS status.nominatedNodeName (with PodScheduled=False) on the pod;
//	3. evict: a Preempted event on each victim and a pod.cmd.delete with reason Preempted to the store
//	   (precondition: the victim's uid; message id preempt-<pod uid>-<node>-<victim uid>).
//
// Marking before claiming keeps two decisions for the same pod (two scheduler replicas, a stale cache)
// from evicting two victim sets: whichever claims second finds the pod nominated to a node whose
// victims are still going, drops its own marks and evicts nothing. Every step is idempotent, so a
// redelivered decision repeats them harmlessly.

// ReasonPreempted is the delete reason and event reason of a preemption's victims.
const ReasonPreempted = "Preempted"

// nomination is what a decision's nomination becomes.
type nomination struct {
	node    string
	victims []*pb.PreemptionVictim // to evict now (empty: nothing to evict)
}

// nomination settles the pod's nominated node for decision d and, when d evicts, marks its victims.
func (s *Service) nomination(ctx context.Context, pod *pb.Pod, d *pb.SchedulingDecision) (nomination, error) {
	uid := pod.GetMetadata().GetUid()
	old, want := pod.GetStatus().GetNominatedNodeName(), d.GetNominatedNode()
	if old != "" && old != want {
		pending, err := s.victimsPending(ctx, old, uid)
		if err != nil {
			return nomination{}, err
		}
		if pending {
			// An earlier preemption for this pod still runs: it stands, this decision evicts nothing.
			if want != "" {
				if err := s.unnominate(ctx, want, uid); err != nil { // marks a lost claim may have left
					return nomination{}, err
				}
				metrics.Count("binder.preemptions_superseded", 1)
			}
			return nomination{node: old}, nil
		}
	}
	if want == "" || len(d.GetVictims()) == 0 {
		return nomination{node: want}, nil
	}
	victims, err := s.markVictims(ctx, want, pod, d.GetVictims())
	if err != nil {
		return nomination{}, err
	}
	return nomination{node: want, victims: victims}, nil
}

// markVictims marks the victims still on node (and of lower priority than pod, whatever the decision
// says) and lists pod as nominated there. It returns the victims to evict.
func (s *Service) markVictims(ctx context.Context, node string, pod *pb.Pod, victims []*pb.PreemptionVictim) ([]*pb.PreemptionVictim, error) {
	uid := pod.GetMetadata().GetUid()
	prio := pod.GetSpec().GetPriority()
	for range maxAttempts {
		a, rev, err := s.allocation(ctx, node, true)
		if err != nil {
			return nil, err
		}
		changed := false
		var out []*pb.PreemptionVictim
		for _, v := range victims {
			pa, ok := a.Pods[v.GetUid()]
			if !ok || pa.GetPriority() >= prio {
				continue // gone already, or not preemptible by this pod
			}
			out = append(out, v)
			if pa.GetPreemptedBy() == "" {
				pa = proto.Clone(pa).(*pb.PodAllocation)
				pa.PreemptedBy = uid
				a.Pods[v.GetUid()] = pa
				changed = true
			}
		}
		if _, placed := a.Pods[uid]; !placed && a.GetNominated()[uid] == nil && len(out) > 0 {
			if a.Nominated == nil {
				a.Nominated = map[string]*pb.PodAllocation{}
			}
			a.Nominated[uid] = podAllocation(pod, podutil.PodRequests(pod))
			changed = true
		}
		if !changed {
			return out, nil
		}
		newRev, err := bus.Update(ctx, s.b.Alloc, bus.NodeKey(node), a, rev)
		if errors.Is(err, bus.ErrConflict) {
			s.alloc.forget(node)
			continue
		}
		if err != nil {
			s.alloc.forget(node)
			return nil, fmt.Errorf("mark victims of %s on %s: %w", uid, node, err)
		}
		s.alloc.put(node, a, newRev)
		return out, nil
	}
	return nil, fmt.Errorf("mark victims of %s on %s: %w", uid, node, errRetry)
}

// victimsPending reports whether pods preempted for uid are still on node.
func (s *Service) victimsPending(ctx context.Context, node, uid string) (bool, error) {
	a, _, err := s.allocation(ctx, node, true)
	if err != nil {
		return false, err
	}
	for _, p := range a.GetPods() {
		if p.GetPreemptedBy() == uid {
			return true, nil
		}
	}
	return false, nil
}

// unnominate drops uid's nomination on node and its marks on the victims still there (idempotent).
func (s *Service) unnominate(ctx context.Context, node, uid string) error {
	for range maxAttempts {
		a, rev, err := s.allocation(ctx, node, true)
		if err != nil {
			return err
		}
		changed := false
		if _, ok := a.GetNominated()[uid]; ok {
			delete(a.Nominated, uid)
			changed = true
		}
		for vuid, p := range a.GetPods() {
			if p.GetPreemptedBy() == uid {
				p = proto.Clone(p).(*pb.PodAllocation)
				p.PreemptedBy = ""
				a.Pods[vuid] = p
				changed = true
			}
		}
		if !changed || rev == 0 {
			return nil
		}
		newRev, err := bus.Update(ctx, s.b.Alloc, bus.NodeKey(node), a, rev)
		if errors.Is(err, bus.ErrConflict) {
			s.alloc.forget(node)
			continue
		}
		if err != nil {
			s.alloc.forget(node)
			return fmt.Errorf("drop nomination of %s on %s: %w", uid, node, err)
		}
		s.alloc.put(node, a, newRev)
		return nil
	}
	return fmt.Errorf("drop nomination of %s on %s: %w", uid, node, errRetry)
}

// evict records a Preempted event on each victim and asks the store to delete it gracefully (the
// victim's own grace period) with reason Preempted.
func (s *Service) evict(ctx context.Context, pod *pb.Pod, nom nomination) error {
	if len(nom.victims) == 0 {
		return nil
	}
	uid := pod.GetMetadata().GetUid()
	futures := make([]jetstream.PubAckFuture, 0, 2*len(nom.victims))
	for _, v := range nom.victims {
		ref := &pb.ObjectReference{Kind: "Pod", ApiVersion: "v1", Namespace: v.GetNamespace(), Name: v.GetName(), Uid: v.GetUid()}
		msg := fmt.Sprintf("Preempted by pod %s on node %s", uid, nom.node)
		ev, err := s.rec.Event(ref, "Normal", ReasonPreempted, msg, uid, s.now())
		if err != nil {
			return fmt.Errorf("record Preempted for %s: %w", v.GetUid(), err)
		}
		cmd := &pb.PodCommand{
			Op:              pb.PodCommand_OP_DELETE,
			Pod:             &pb.Pod{Metadata: &pb.ObjectMeta{Namespace: v.GetNamespace(), Name: v.GetName(), Uid: v.GetUid()}},
			PreconditionUid: v.GetUid(),
			Reason:          ReasonPreempted,
			User:            s.actor,
		}
		del, err := s.pub.PublishAsync(bus.SubjPodDelete, cmd, bus.Meta{
			MsgID:       "preempt-" + uid + "-" + nom.node + "-" + v.GetUid(),
			Correlation: pod.GetInternal().GetCorrelationId(),
			PodUID:      v.GetUid(),
			Key:         v.GetNamespace() + "/" + v.GetName(),
		})
		if err != nil {
			return fmt.Errorf("ask the store to delete victim %s: %w", v.GetUid(), err)
		}
		futures = append(futures, ev, del)
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		return fmt.Errorf("preempt for %s on %s: %w", uid, nom.node, err)
	}
	metrics.Count("binder.preemption_victims", int64(len(nom.victims)))
	return nil
}
