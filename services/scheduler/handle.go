package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/cache"
	"github.com/podbus/podbus/sched/config"
	"github.com/podbus/podbus/sched/framework"
)

// maxCacheWaits bounds how often a requeued pod waits for the cache to catch up before it is scheduled
// on whatever the cache holds (the watch may be stuck; a stale decision is still a decision).
const maxCacheWaits = 20

// handlePending schedules one pod from pod.pending:
//
//	decode ─▶ deleting? ack ─▶ redelivery of a decision we made? publish it again
//	       ─▶ forget earlier assumption/parking ─▶ snapshot ─▶ schedule
//	       ─▶ fits: assume, publish (undo the assumption if that fails) ─▶ ack
//	       ─▶ fits nowhere: publish unschedulable, park for requeue      ─▶ ack
func (s *Service) handlePending(ctx context.Context, m *bus.Msg) error {
	pp := &pb.PendingPod{}
	if err := m.Decode(pp); err != nil {
		return err
	}
	pod := pp.GetPod()
	md := pod.GetMetadata()
	uid := md.GetUid()
	if uid == "" || md.GetName() == "" {
		return fmt.Errorf("%w: pending pod without uid or name (stream position %d)", bus.ErrMalformed, m.Position())
	}
	if md.GetDeletionTimestamp() != nil {
		s.cache.Forget(uid)
		s.parks.Remove(uid)
		metrics.Count("scheduler.skipped_deleting", 1)
		return nil
	}
	conflicted := pp.GetCause() == CauseConflict
	if conflicted && m.Delivered == 1 {
		metrics.Count("scheduler.conflict_requeues", 1)
		metrics.Count("scheduler.conflict_requeues."+s.cfg.ID, 1)
	}
	// A requeue names the change that caused it (a requeue's message id, a conflict's trigger header):
	// deciding before the cache has it would repeat the choice that just failed.
	t := retryTrigger(m.Meta.MsgID, uid)
	if conflicted {
		t = m.Meta.Trigger
	}
	if t != "" && !s.cache.HasSeen(t) && m.Delivered < maxCacheWaits {
		metrics.Count("scheduler.cache_waits", 1)
		return bus.RetryAfter(20*time.Millisecond, errCacheBehind)
	}

	// A redelivered message we already decided (the ack was lost): the decision's message id is the
	// same, so JetStream drops the copy; publishing it again only makes sure the first one is stored.
	if node, seq, ok := s.cache.Assumed(uid); ok && seq == m.Position() {
		d := s.decision(pp, m.Position())
		d.Node = node
		return s.publishDecision(ctx, pod, d, m.Position())
	}
	// Any other pending message means the pod is not (or no longer) placed: an earlier decision lost a
	// conflict at the binder, or this is a requeue.
	if s.cache.Forget(uid) && conflicted {
		// Its assumption held room on its node in this replica's view; pods parked as unschedulable
		// against that view may fit now.
		s.parks.Trigger(cache.Change{
			Trigger: "f" + s.cfg.ID + "-" + strconv.FormatUint(m.Position(), 10),
			Event:   framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: framework.Delete},
		})
	}
	s.parks.Remove(uid)

	algo := s.profileFor(pod)
	if algo == nil {
		// Another scheduler's pod (spec.schedulerName names no profile of ours): leave it alone, as
		// kube-scheduler does; it stays pending.
		metrics.Count("scheduler.skipped_other_scheduler", 1)
		return nil
	}
	attemptStart := time.Now()
	s.cycle.Lock()
	snap, seen := s.cache.Snapshot()
	pi := framework.NewPodInfo(pod)
	c := algo.Acquire()
	defer algo.Release(c)
	res, err := algo.Run(c, snap, pi)
	var assumeErr error
	if err == nil {
		assumeErr = s.cache.Assume(pi, res.Node, m.Position())
		if assumeErr == nil {
			if assumeErr = algo.Reserve(c, pi, res.Node); assumeErr != nil {
				s.cache.Forget(uid)
			}
		}
	}
	// decidedAt is read inside the cycle: a replay (podbus audit what-if) puts decisions back in the
	// order they were made.
	decidedAt := s.now()
	d := s.decision(pp, m.Position())
	d.DecidedAt = timestamppb.New(decidedAt)
	d.Requests = pi.Requests
	d.NodesEvaluated = int32(res.Evaluated)
	var sent jetstream.PubAckFuture
	var sendErr error
	if err == nil && assumeErr == nil {
		d.Node, d.Score = res.Node, res.Score
		// Sent before the cycle lock is released, so decisions reach the stream in the order they were
		// made: the binder commits constrained pods in stream order, and each then finds committed
		// exactly the pods this replica had assumed when it decided.
		sent, sendErr = s.sendDecision(d, m, decisionMeta(pod, d, m.Position()))
	}
	s.cycle.Unlock()

	var fit *framework.FitError
	switch {
	case err == nil:
		if assumeErr != nil {
			return fmt.Errorf("schedule %s: %w", d.GetName(), assumeErr)
		}
		if sendErr == nil {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			sendErr = bus.Wait(wctx, sent)
			cancel()
		}
		if sendErr != nil {
			algo.Unreserve(c, pi, res.Node) // undo: nobody will commit this assumption
			s.cache.Forget(uid)
			return fmt.Errorf("publish decision for %s/%s: %w", d.GetNamespace(), d.GetName(), sendErr)
		}
		metrics.Count("scheduler.decisions", 1)
		attempts(pod).Scheduled.Since(attemptStart)
		metrics.StageScheduling.Since(m.Time)
		return nil

	case errors.As(err, &fit) || errors.Is(err, framework.ErrNoNodesAvailable):
		d.Unschedulable = true
		d.Message = err.Error()
		// Preemption: the binder records the nomination and evicts the victims; the pod stays parked
		// until their room is released (the alloc record losing them requeues it).
		d.NominatedNode = res.Post.GetNominatedNode()
		for _, v := range res.Post.GetVictims() {
			d.Victims = append(d.Victims, &pb.PreemptionVictim{
				Uid: v.UID, Namespace: v.Namespace, Name: v.Name, Priority: v.Priority,
			})
		}
		if len(d.Victims) > 0 {
			metrics.Count("scheduler.preemptions", 1)
			metrics.Count("scheduler.preemption_victims", int64(len(d.Victims)))
		}
		if fit != nil {
			d.Reasons = fit.Reasons
			if d.NodesEvaluated == 0 {
				d.NodesEvaluated = int32(fit.NumAllNodes)
			}
		}
		if err := s.publishDecision(ctx, pod, d, m.Position()); err != nil {
			return err
		}
		s.parks.Add(pod, pp.GetRevision(), seen, algo.RequeueFor(fit))
		metrics.Count("scheduler.decisions", 1)
		metrics.Count("scheduler.unschedulable", 1)
		attempts(pod).Unschedulable.Since(attemptStart)
		if fit != nil {
			for _, p := range fit.Plugins {
				metrics.UnschedulableByPlugin.WithLabelValues(p).Inc()
			}
		}
		return nil

	default: // a plugin failed: no decision, retry with back-off
		attempts(pod).Error.Since(attemptStart)
		return fmt.Errorf("schedule %s/%s: %w", md.GetNamespace(), md.GetName(), err)
	}
}

func (s *Service) decision(pp *pb.PendingPod, seq uint64) *pb.SchedulingDecision {
	md := pp.GetPod().GetMetadata()
	return &pb.SchedulingDecision{
		Uid:         md.GetUid(),
		Namespace:   md.GetNamespace(),
		Name:        md.GetName(),
		PodRevision: pp.GetRevision(),
		Pod:         pp.GetPod(),
		Scheduler:   s.actor,
		DecidedAt:   timestamppb.New(s.now()),
		Attempt:     pp.GetPod().GetInternal().GetScheduleAttempts(),
	}
}

// Field numbers of the pod in a pending message and in a decision.
var (
	pendingPodField  = bus.FieldNumber(&pb.PendingPod{}, "pod")
	decisionPodField = bus.FieldNumber(&pb.SchedulingDecision{}, "pod")
)

// sendDecision publishes d, a decision for the pod of the pending message m, with the pod's bytes as m
// carried them (the decision's pod is the pending one, unchanged).
func (s *Service) sendDecision(d *pb.SchedulingDecision, m *bus.Msg, meta bus.Meta) (jetstream.PubAckFuture, error) {
	pod := d.Pod
	raw, ok := bus.Field(m.Data, pendingPodField)
	if !ok {
		var err error
		if raw, err = proto.Marshal(pod); err != nil {
			return nil, err
		}
	}
	d.Pod = nil
	data, err := bus.Splice(d, decisionPodField, raw)
	d.Pod = pod
	if err != nil {
		return nil, err
	}
	return s.pub.PublishEncodedAsync(bus.SubjPodScheduled, data, meta)
}

// DecisionMsgID is the de-duplication id of the decision taken for the pending message at stream seq.
func DecisionMsgID(uid string, pendingSeq uint64) string {
	return "sched-" + uid + "-" + strconv.FormatUint(pendingSeq, 10)
}

func decisionMeta(pod *pb.Pod, d *pb.SchedulingDecision, seq uint64) bus.Meta {
	return bus.Meta{
		MsgID:       DecisionMsgID(d.GetUid(), seq),
		Correlation: pod.GetInternal().GetCorrelationId(),
		PodUID:      d.GetUid(),
		Key:         d.GetNamespace() + "/" + d.GetName(),
	}
}

func (s *Service) publishDecision(ctx context.Context, pod *pb.Pod, d *pb.SchedulingDecision, seq uint64) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.pub.Publish(pctx, bus.SubjPodScheduled, d, decisionMeta(pod, d, seq))
	if err != nil {
		return fmt.Errorf("publish decision for %s/%s: %w", d.GetNamespace(), d.GetName(), err)
	}
	return nil
}

func decodeEntry(e jetstream.KeyValueEntry, m proto.Message) error {
	if err := decodeData(e.Value(), m); err != nil {
		return fmt.Errorf("%s/%s: %w", e.Bucket(), e.Key(), err)
	}
	return nil
}

func decodeData(data []byte, m proto.Message) error {
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("decode %T: %w", m, errors.Join(bus.ErrMalformed, err))
	}
	return nil
}

// attempts are the attempt metrics of pod's profile (one of this replica's, so the label stays bounded):
// kube-scheduler's scheduler_schedule_attempts_total and scheduler_scheduling_attempt_duration_seconds.
func attempts(pod *pb.Pod) *metrics.Attempts {
	profile := pod.GetSpec().GetSchedulerName()
	if profile == "" {
		profile = config.DefaultSchedulerName
	}
	return metrics.SchedulingAttemptsFor(profile)
}
