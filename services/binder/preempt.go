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
//	1. mark: in the node's alloc meta key (one compare-and-set over the node's keys) each victim gets
//	   preempted_by=<pod uid> and the pod is listed under nominated, so every scheduler replica holds the room for it against lower priorities and knows
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
// says) and lists pod as nominated there, in the node's meta key. It returns the victims to evict.
func (s *Service) markVictims(ctx context.Context, node string, pod *pb.Pod, victims []*pb.PreemptionVictim) ([]*pb.PreemptionVictim, error) {
	uid := pod.GetMetadata().GetUid()
	prio := pod.GetSpec().GetPriority()
	for range maxAttempts {
		var rev uint64
		var meta *pb.NodeAllocation
		var out []*pb.PreemptionVictim
		changed := false
		err := s.inspect(ctx, node, func(n *nodeState) {
			rev, meta = n.rev, cloneMeta(n.meta)
			for _, v := range victims {
				pa := n.pods[v.GetUid()]
				if pa == nil || pa.GetPriority() >= prio {
					continue // gone already, or not preemptible by this pod
				}
				out = append(out, v)
				if meta.Pods[v.GetUid()].GetPreemptedBy() == "" {
					meta.Pods[v.GetUid()] = &pb.PodAllocation{PreemptedBy: uid}
					changed = true
				}
			}
			if n.pods[uid] == nil && meta.Nominated[uid] == nil && len(out) > 0 {
				meta.Nominated[uid] = podAllocation(pod, podutil.PodRequests(pod))
				changed = true
			}
			if changed {
				pruneMarks(meta, n)
			}
		})
		if err != nil {
			return nil, err
		}
		if !changed {
			return out, nil
		}
		_, err = s.writeAlloc(ctx, node, "", nil, meta, rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("mark victims of %s on %s: %w", uid, node, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("mark victims of %s on %s: %w", uid, node, errRetry)
}

// victimsPending reports whether pods preempted for uid are still on node. It reads the node afresh.
func (s *Service) victimsPending(ctx context.Context, node, uid string) (bool, error) {
	n, err := loadNodeAlloc(ctx, s.b.Alloc, node)
	if err != nil {
		return false, err
	}
	for vuid, m := range n.meta.GetPods() {
		if m.GetPreemptedBy() == uid && n.pods[vuid] != nil {
			return true, nil
		}
	}
	return false, nil
}

// unnominate drops uid's nomination on node and its marks on the victims still there (idempotent).
func (s *Service) unnominate(ctx context.Context, node, uid string) error {
	return s.editMeta(ctx, node, func(meta *pb.NodeAllocation) {
		delete(meta.Nominated, uid)
		for vuid, m := range meta.Pods {
			if m.GetPreemptedBy() == uid {
				delete(meta.Pods, vuid)
			}
		}
	})
}

// dropNomination drops uid's nomination on node, its victims' marks left (idempotent).
func (s *Service) dropNomination(ctx context.Context, node, uid string) error {
	return s.editMeta(ctx, node, func(meta *pb.NodeAllocation) { delete(meta.Nominated, uid) })
}

// editMeta changes node's meta key with f (compare-and-set on the node's keys); an unchanged key is
// not written, an empty one is deleted.
func (s *Service) editMeta(ctx context.Context, node string, f func(meta *pb.NodeAllocation)) error {
	for range maxAttempts {
		var rev uint64
		var meta *pb.NodeAllocation
		changed := false
		err := s.inspect(ctx, node, func(n *nodeState) {
			if n.meta == nil {
				return
			}
			rev, meta = n.rev, cloneMeta(n.meta)
			f(meta)
			pruneMarks(meta, n)
			changed = !proto.Equal(meta, n.meta)
		})
		if err != nil {
			return err
		}
		if !changed {
			return nil
		}
		if len(meta.Nominated) == 0 && len(meta.Pods) == 0 {
			meta = nil
		}
		_, err = s.writeAlloc(ctx, node, "", nil, meta, rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("change preemptions on %s: %w", node, err)
		}
		return nil
	}
	return fmt.Errorf("change preemptions on %s: %w", node, errRetry)
}

// inspect runs f on node's state as the cache holds it (read afresh when it cannot say); f must not keep
// or change what it is given.
func (s *Service) inspect(ctx context.Context, node string, f func(n *nodeState)) error {
	if s.alloc.inspect(node, f) {
		return nil
	}
	n, err := loadNodeAlloc(ctx, s.b.Alloc, node)
	if err != nil {
		return err
	}
	s.alloc.load(node, n)
	f(n)
	return nil
}

// cloneMeta is a meta record the caller may change (an empty one for nil).
func cloneMeta(m *pb.NodeAllocation) *pb.NodeAllocation {
	out := &pb.NodeAllocation{Nominated: map[string]*pb.PodAllocation{}, Pods: map[string]*pb.PodAllocation{}}
	for k, v := range m.GetNominated() {
		out.Nominated[k] = v
	}
	for k, v := range m.GetPods() {
		out.Pods[k] = v
	}
	return out
}

// pruneMarks drops the marks of victims that left the node.
func pruneMarks(meta *pb.NodeAllocation, n *nodeState) {
	for vuid := range meta.Pods {
		if n.pods[vuid] == nil {
			delete(meta.Pods, vuid)
		}
	}
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
