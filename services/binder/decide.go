package binder

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/podbus/podbus/internal/events"
	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/nodeaffinity"
	"github.com/podbus/podbus/sched/plugins/tainttoleration"
)

const (
	// componentScheduler is the event source: in Kubernetes binding is part of the default scheduler.
	componentScheduler  = "default-scheduler"
	causeConflict       = "conflict"
	reasonUnschedulable = "Unschedulable"
	// maxAttempts bounds each compare-and-set loop; after that the message is retried by redelivery.
	maxAttempts = 32
)

// errRetry says a compare-and-set loop ran out of attempts; the message is handled again later.
var errRetry = errors.New("too many concurrent writers")

// verdict is what a decision still means for the pod as currently stored.
type verdict int

const (
	verdictAct     verdict = iota // unbound and alive: act on the decision
	verdictRelease                // gone, replaced, deleting or bound elsewhere: drop, releasing what it reserved
	verdictBound                  // already bound to the decision's node: finish that binding again
	verdictDone                   // bound here and being deleted: nothing left to do
)

// judge compares a decision with the pod as stored (nil when absent).
func judge(pod *pb.Pod, d *pb.SchedulingDecision) verdict {
	if pod == nil || pod.GetMetadata().GetUid() != d.GetUid() {
		return verdictRelease
	}
	deleting := pod.GetMetadata().GetDeletionTimestamp() != nil
	if node := pod.GetSpec().GetNodeName(); node != "" && preBound(pod) {
		// Created with spec.nodeName: the scheduler only checked that it fits its node. It is admitted
		// like any decision (a reservation first, so the node is never overcommitted), or waits for room.
		if deleting || (!d.GetUnschedulable() && d.GetNode() != node) {
			return verdictRelease
		}
		return verdictAct
	}
	if node := pod.GetSpec().GetNodeName(); node != "" {
		switch {
		case node != d.GetNode():
			return verdictRelease
		case deleting:
			// Its reservation is released by pod.deleted; re-adding it here could outlive the pod.
			return verdictDone
		default:
			return verdictBound
		}
	}
	if deleting {
		return verdictRelease
	}
	return verdictAct
}

// preBound says the pod names its node but was never bound by a binder (PodScheduled is not True): a
// client created it with spec.nodeName, as kwok users and scheduler benchmarks do.
func preBound(pod *pb.Pod) bool {
	c := podutil.PodCondition(pod, podutil.PodScheduled)
	return pod.GetSpec().GetNodeName() != "" && (c == nil || c.GetStatus() != podutil.True)
}

// decide handles one decision; seq is its stream sequence (it names the conflict requeue).
func (s *Service) decide(ctx context.Context, d *pb.SchedulingDecision, seq uint64) error {
	return s.decideWith(ctx, d, seq, nil, nil)
}

// storedPod is a pod as read from the pods bucket, with the revision a binding compare-and-sets against.
type storedPod struct {
	pod *pb.Pod // nil when absent
	rev uint64
}

// decideWith is decide with the pod already read (first, nil for none) and the outcome of the
// decision's checked reservation, made already with others' on that pod (handleCheckedDecisions); nil
// when there is none. Only the first attempt can use them.
//
// The pod a decision carries is never used: whoever can publish pod.scheduled could carry any pod body
// with the current revision, and the compare-and-set would take it. The binder binds the stored pod.
func (s *Service) decideWith(ctx context.Context, d *pb.SchedulingDecision, seq uint64, first *storedPod, pre *checkReq) error {
	key := bus.PodKey(d.GetNamespace(), d.GetName())
	for attempt := range maxAttempts {
		var pod *pb.Pod
		var rev uint64
		var err error
		if attempt == 0 && first != nil {
			pod, rev = first.pod, first.rev
		} else if pod, rev, err = s.pod(ctx, key); err != nil {
			return err
		}
		switch judge(pod, d) {
		case verdictRelease:
			metrics.Count("binder.stale_decisions", 1)
			return s.releaseStale(ctx, d)
		case verdictDone:
			return nil
		case verdictBound:
			return s.rebind(ctx, pod, rev, d.GetNode())
		}
		if why, err := s.refusal(ctx, pod, d); err != nil {
			return err
		} else if why != "" {
			return s.refuse(ctx, pod, rev, d, seq, why)
		}

		if d.GetUnschedulable() {
			err = s.markUnschedulable(ctx, key, pod, rev, d)
		} else {
			err = s.schedule(ctx, key, pod, rev, d, seq, pre)
		}
		pre = nil
		if errors.Is(err, bus.ErrConflict) {
			metrics.Count("binder.cas_conflicts.pod", 1)
			continue // the pod changed under us: judge the decision again
		}
		return err
	}
	return fmt.Errorf("decision for %s: %w", key, errRetry)
}

// releaseStale releases the reservation a decision for a pod that is gone, replaced or placed elsewhere
// may have made. A reservation held under the decision's uid by a pod of another name is not its own
// (a forged decision can name any uid) and stays.
func (s *Service) releaseStale(ctx context.Context, d *pb.SchedulingDecision) error {
	if d.GetNode() == "" {
		return nil
	}
	pa, err := s.podAlloc(ctx, d.GetNode(), d.GetUid())
	if err != nil || pa == nil {
		return err
	}
	if pa.GetNamespace() != d.GetNamespace() || pa.GetName() != d.GetName() {
		metrics.Count("binder.refused.foreign_uid", 1)
		s.log.Warn("decision names the uid of another pod; refused", "pod", d.GetNamespace()+"/"+d.GetName(),
			"uid", d.GetUid(), "holder", pa.GetNamespace()+"/"+pa.GetName(), "node", d.GetNode(), "scheduler", d.GetScheduler())
		return nil
	}
	return s.withdraw(ctx, d.GetNode(), d.GetUid(), func(e *pb.PodAllocation) bool {
		return e.GetNamespace() == d.GetNamespace() && e.GetName() == d.GetName()
	})
}

// Why a decision is refused for the pod's own constraints on its node (the scheduler's filter reasons).
const (
	refusedAffinity = nodeaffinity.ErrReasonPod
	refusedTaint    = tainttoleration.ErrReasonUntolerated
)

// refusal says why the stored pod may not go on the node the decision names (or nominates for a
// preemption), "" when it may: the pod's nodeSelector and required node affinity and the node's
// NoSchedule and NoExecute taints, which any publisher of pod.scheduled could otherwise ignore. A pod
// created with spec.nodeName is exempt, as in Kubernetes, where only the kubelet admits it.
func (s *Service) refusal(ctx context.Context, pod *pb.Pod, d *pb.SchedulingDecision) (string, error) {
	name := d.GetNode()
	if d.GetUnschedulable() && len(d.GetVictims()) > 0 {
		name = d.GetNominatedNode()
	}
	if name == "" || preBound(pod) {
		return "", nil
	}
	n, err := s.node(ctx, name)
	if errors.Is(err, bus.ErrNotFound) {
		return "", nil // reserve refuses an unknown node; a nomination to it evicts nothing
	}
	if err != nil {
		return "", err
	}
	if !nodeaffinity.GetRequired(pod).Match(n) {
		return refusedAffinity, nil
	}
	tols := pod.GetSpec().GetTolerations()
	for _, t := range n.GetSpec().GetTaints() {
		e := t.GetEffect()
		if (e == framework.TaintEffectNoSchedule || e == framework.TaintEffectNoExecute) && !framework.TolerationsTolerateTaint(tols, t) {
			return refusedTaint, nil
		}
	}
	return "", nil
}

// refuse drops a decision whose node the pod may not go on, and sends the pod back to the schedulers:
// the decision may be honest and the node have changed since (a new taint, a removed label).
func (s *Service) refuse(ctx context.Context, pod *pb.Pod, rev uint64, d *pb.SchedulingDecision, seq uint64, why string) error {
	metrics.Count("binder.refused_decisions", 1)
	s.log.Warn("decision refused: the pod may not go on its node", "pod", pod.GetMetadata().GetUid(),
		"node", d.GetNode(), "nominated", d.GetNominatedNode(), "why", why, "scheduler", d.GetScheduler())
	return s.requeue(ctx, pod, rev, seq, "")
}

// pod reads the stored pod; nil when it does not exist.
func (s *Service) pod(ctx context.Context, key string) (*pb.Pod, uint64, error) {
	pod := &pb.Pod{}
	rev, err := bus.Get(ctx, s.b.Pods, key, pod)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read pod %s: %w", key, err)
	}
	return pod, rev, nil
}

// schedule reserves room on the decision's node and binds the pod there. bus.ErrConflict means the pod
// changed before the binding; the reservation stays and the caller judges the decision again.
func (s *Service) schedule(ctx context.Context, key string, pod *pb.Pod, rev uint64, d *pb.SchedulingDecision, seq uint64, pre *checkReq) error {
	var res reservation
	var allocRev uint64
	var err error
	if pre != nil && pre.pod == pod {
		res, allocRev, err = pre.res, pre.rev, pre.err
	} else if s.view.concerns(pod) {
		res, allocRev, err = s.reserveChecked(ctx, d.GetNode(), pod, checkedID(d, seq))
	} else {
		res, allocRev, err = s.reserve(ctx, d.GetNode(), pod)
	}
	if err != nil {
		return err
	}
	if res == reservationBusy {
		return fmt.Errorf("pod %s on %s: %s: %w", pod.GetMetadata().GetUid(), d.GetNode(), res, errRetry)
	}
	if !res.ok() {
		return s.conflict(ctx, pod, rev, d, seq, res, allocRev)
	}
	return s.commit(ctx, key, pod, rev, d)
}

// commit binds the pod, whose reservation on the decision's node is made, and announces it.
// bus.ErrConflict means the pod changed before the binding; the reservation stays.
func (s *Service) commit(ctx context.Context, key string, pod *pb.Pod, rev uint64, d *pb.SchedulingDecision) error {
	if s.afterReserve != nil {
		if err := s.afterReserve(d); err != nil {
			return err
		}
	}
	old := pod.GetStatus().GetNominatedNodeName()
	next, raw, newRev, err := s.bind(ctx, key, pod, rev, d)
	if err != nil {
		return err
	}
	if d.GetDecidedAt() != nil {
		metrics.StageBinding.Since(d.GetDecidedAt().AsTime())
	}
	// A pod nominated elsewhere by a preemption no longer needs that room (on its own node, reserve
	// dropped the nomination already).
	if old != "" && old != d.GetNode() {
		if err := s.unnominate(ctx, old, pod.GetMetadata().GetUid()); err != nil {
			return err
		}
	}
	return s.announce(ctx, next, raw, newRev, d.GetNode())
}

// checkedID names a decision's tentative reservation.
func checkedID(d *pb.SchedulingDecision, seq uint64) string {
	return fmt.Sprintf("%s-%d", d.GetScheduler(), seq)
}

// bind writes the binding on the pod (compare-and-set on rev). It changes pod itself, which is this
// attempt's own copy, read from the store: a failed compare-and-set
// makes the caller read the pod again.
// It returns the pod as stored, in both forms.
func (s *Service) bind(ctx context.Context, key string, pod *pb.Pod, rev uint64, d *pb.SchedulingDecision) (*pb.Pod, []byte, uint64, error) {
	next := pod
	if next.Spec == nil {
		next.Spec = &pb.PodSpec{}
	}
	next.Spec.NodeName = d.GetNode()
	if next.Status != nil {
		next.Status.NominatedNodeName = ""
	}
	podutil.SetPodCondition(next, &pb.PodCondition{Type: podutil.PodScheduled, Status: podutil.True}, s.now())
	if next.Internal == nil {
		next.Internal = &pb.PodInternal{}
	}
	next.Internal.ScheduleAttempts = max(next.Internal.GetScheduleAttempts(), d.GetAttempt())
	raw, err := proto.Marshal(next)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("bind pod %s to %s: %w", key, d.GetNode(), err)
	}
	newRev, err := bus.UpdateEncoded(ctx, s.b.Pods, key, raw, rev)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("bind pod %s to %s: %w", key, d.GetNode(), err)
	}
	return next, raw, newRev, nil
}

// bindingPodField is PodBinding.pod.
var bindingPodField = bus.FieldNumber(&pb.PodBinding{}, "pod")

// announce hands a bound pod to its node's agent and records the Scheduled event. Both are idempotent
// (fixed message ids), so a redelivered decision may announce again. raw is the pod's stored wire form,
// when at hand.
func (s *Service) announce(ctx context.Context, pod *pb.Pod, raw []byte, rev uint64, node string) error {
	md := pod.GetMetadata()
	subject, mt := bus.SubjPodBound(node), meta(pod, "bound-"+md.GetUid())
	// Both go out at once; the decision is acked only when both are stored.
	var bound jetstream.PubAckFuture
	var err error
	if raw == nil {
		raw, err = proto.Marshal(pod)
	}
	if err == nil {
		raw, err = bus.Splice(&pb.PodBinding{Revision: rev, Node: node}, bindingPodField, raw)
	}
	if err == nil {
		bound, err = s.pub.PublishEncodedAsync(subject, raw, mt)
	}
	if err != nil {
		return fmt.Errorf("hand pod %s to %s: %w", md.GetUid(), node, err)
	}
	msg := fmt.Sprintf("Successfully assigned %s/%s to %s", md.GetNamespace(), md.GetName(), node)
	ev, err := s.rec.Event(events.PodRef(pod), "Normal", "Scheduled", msg, node, s.now())
	if err != nil {
		return fmt.Errorf("record Scheduled for %s: %w", md.GetUid(), err)
	}
	if err := bus.Wait(ctx, bound, ev); err != nil {
		return fmt.Errorf("hand pod %s to %s: %w", md.GetUid(), node, err)
	}
	return nil
}

// rebind finishes a binding found already written (a redelivery, or a duplicate decision).
func (s *Service) rebind(ctx context.Context, pod *pb.Pod, rev uint64, node string) error {
	res, _, err := s.reserve(ctx, node, pod)
	if err != nil {
		return err
	}
	switch res {
	case reservationAdded:
		// Only a deletion can take a bound pod's reservation away; if one raced with us, undo.
		metrics.Count("binder.reservations_restored", 1)
		cur, _, err := s.pod(ctx, bus.PodKey(pod.GetMetadata().GetNamespace(), pod.GetMetadata().GetName()))
		if err != nil {
			return err
		}
		if judge(cur, &pb.SchedulingDecision{Uid: pod.GetMetadata().GetUid(), Node: node}) != verdictBound {
			return s.release(ctx, node, pod.GetMetadata().GetUid())
		}
	case reservationHeld:
	case reservationBusy:
		return fmt.Errorf("bound pod %s on %s: %s: %w", pod.GetMetadata().GetUid(), node, res, errRetry)
	default:
		s.log.Error("bound pod has no reservation and none fits", "pod", pod.GetMetadata().GetUid(), "node", node, "why", res)
	}
	return s.announce(ctx, pod, nil, rev, node)
}

// markUnschedulable records that no node fits: PodScheduled=False, status.nominatedNodeName and a
// FailedScheduling event; with victims it carries out the preemption (see preempt.go).
func (s *Service) markUnschedulable(ctx context.Context, key string, pod *pb.Pod, rev uint64, d *pb.SchedulingDecision) error {
	nom, err := s.nomination(ctx, pod, d)
	if err != nil {
		return err
	}
	next := proto.Clone(pod).(*pb.Pod)
	cond := &pb.PodCondition{Type: podutil.PodScheduled, Status: podutil.False, Reason: reasonUnschedulable, Message: d.GetMessage()}
	changed := podutil.SetPodCondition(next, cond, s.now())
	if next.GetStatus().GetNominatedNodeName() != nom.node {
		if next.Status == nil {
			next.Status = &pb.PodStatus{}
		}
		next.Status.NominatedNodeName = nom.node
		changed = true
	}
	if changed {
		if _, err := bus.Update(ctx, s.b.Pods, key, next, rev); err != nil {
			return fmt.Errorf("mark pod %s unschedulable: %w", key, err)
		}
	}
	if old := pod.GetStatus().GetNominatedNodeName(); old != "" && old != nom.node {
		if err := s.unnominate(ctx, old, pod.GetMetadata().GetUid()); err != nil {
			return err
		}
	}
	// Deduplicated by the revision the scheduler saw, which a redelivery repeats.
	dedup := strconv.FormatUint(d.GetPodRevision(), 10)
	f, err := s.rec.Event(events.PodRef(pod), "Warning", "FailedScheduling", d.GetMessage(), dedup, s.now())
	if err != nil {
		return fmt.Errorf("record FailedScheduling for %s: %w", key, err)
	}
	if err := bus.Wait(ctx, f); err != nil {
		return err
	}
	return s.evict(ctx, pod, nom)
}

// conflict sends a pod whose decision could not be honoured back to the schedulers. A refusal for room
// names the alloc record's revision, so the scheduler that takes the pod waits until its cache has
// seen it rather than repeating the same stale choice.
func (s *Service) conflict(ctx context.Context, pod *pb.Pod, rev uint64, d *pb.SchedulingDecision, seq uint64, why reservation, allocRev uint64) error {
	metrics.Count("binder.conflicts", 1)
	metrics.Count("binder.conflicts."+d.GetScheduler(), 1)
	s.log.Info("decision refused; pod goes back to the schedulers", "pod", pod.GetMetadata().GetUid(), "node", d.GetNode(), "why", why, "scheduler", d.GetScheduler())
	var trigger string
	if (why == reservationNoRoom || why == reservationConstraint) && allocRev > 0 {
		trigger = "a" + strconv.FormatUint(allocRev, 10)
	}
	return s.requeue(ctx, pod, rev, seq, trigger)
}

// requeue publishes the pod as pending again, as a conflict; trigger, when set, names the change the
// scheduler's view must include first.
func (s *Service) requeue(ctx context.Context, pod *pb.Pod, rev uint64, seq uint64, trigger string) error {
	uid := pod.GetMetadata().GetUid()
	msg := &pb.PendingPod{Pod: pod, Revision: rev, Cause: causeConflict}
	m := meta(pod, fmt.Sprintf("conflict-%s-%d", uid, seq))
	m.Trigger = trigger
	if err := s.pub.Publish(ctx, bus.PendingSubject(podutil.ConstraintGroup(pod)), msg, m); err != nil {
		return fmt.Errorf("requeue pod %s: %w", uid, err)
	}
	return nil
}

// meta is the header set of a message about pod.
func meta(pod *pb.Pod, msgID string) bus.Meta {
	md := pod.GetMetadata()
	return bus.Meta{
		MsgID:       msgID,
		Correlation: pod.GetInternal().GetCorrelationId(),
		PodUID:      md.GetUid(),
		Key:         md.GetNamespace() + "/" + md.GetName(),
	}
}

// get is the stored pod, nil when absent or not read.
func (p *storedPod) get() *pb.Pod {
	if p == nil {
		return nil
	}
	return p.pod
}
