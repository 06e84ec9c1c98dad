package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// maxAttempts bounds the read/compare-and-set loops; after that the command is retried by redelivery.
const maxAttempts = 16

// defaultGracePeriod is Kubernetes' terminationGracePeriodSeconds default.
const defaultGracePeriod = 30

// Kubernetes StatusReasons used in answers.
const (
	ReasonAlreadyExists = "AlreadyExists"
	ReasonNotFound      = "NotFound"
	ReasonConflict      = "Conflict"
	// ReasonExpired answers a create that arrived after its notAfter (a controller's lapsed claim).
	ReasonExpired = "Expired"
)

// Causes of pod.pending messages sent by the store.
const causeCreated = "created"

// errRetry says a compare-and-set lost and the command's loop should read again.
var errRetry = errors.New("lost a compare-and-set; read again")

// commandPodField is PodCommand.pod.
var commandPodField = bus.FieldNumber(&pb.PodCommand{}, "pod")

// create stores a new pod and hands it to the schedulers. raw is the pod's wire form in the command
// (nil: encode it), stored as it is: the command's pod is the stored one.
func (s *Service) create(ctx context.Context, cmd *pb.PodCommand, raw []byte, in bus.Meta) (*pb.CommandResult, error) {
	pod := cmd.GetPod()
	md := pod.GetMetadata()
	key := bus.PodKey(md.GetNamespace(), md.GetName())
	data := raw
	if data == nil {
		var err error
		if data, err = proto.Marshal(pod); err != nil {
			return nil, fmt.Errorf("create pod %s: %w", key, err)
		}
	}
	if na := cmd.GetNotAfter(); na != nil && s.now().After(na.AsTime()) {
		// Too late to add the pod; a redelivery of a create already applied still finishes below.
		cur := &pb.Pod{}
		_, err := bus.Get(ctx, s.pods, key, cur)
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return nil, fmt.Errorf("create pod %s: %w", key, err)
		}
		if err != nil || cur.GetMetadata().GetUid() != md.GetUid() {
			metrics.Count("store.create.expired", 1)
			return failure(http.StatusGone, ReasonExpired, fmt.Sprintf("create of pod %q arrived after its deadline", md.GetName())), nil
		}
	}
	for range maxAttempts {
		rev, err := bus.CreateEncoded(ctx, s.pods, key, data)
		if err == nil {
			res, err := s.created(ctx, pod, data, rev, true, in)
			if err == nil && cmd.GetOmitSentPod() {
				// Stored as sent: the sender has it already.
				res.Pod, res.PodAsSent = nil, true
			}
			return res, err
		}
		if !errors.Is(err, bus.ErrExists) {
			return nil, fmt.Errorf("create pod %s: %w", key, err)
		}
		cur := &pb.Pod{}
		curRev, err := bus.Get(ctx, s.pods, key, cur)
		if errors.Is(err, bus.ErrNotFound) {
			continue // deleted since Create looked: try again
		}
		if err != nil {
			return nil, fmt.Errorf("create pod %s: %w", key, err)
		}
		if cur.GetMetadata().GetUid() != md.GetUid() {
			return failure(http.StatusConflict, ReasonAlreadyExists, fmt.Sprintf("pods %q already exists", md.GetName())), nil
		}
		// Same uid: this command was handled before (redelivery). Answer as the first time did, and queue
		// the pod again unless it has moved on: bound by the binder (the command had no node), or deleting.
		moved := cur.GetSpec().GetNodeName() != pod.GetSpec().GetNodeName() || cur.GetMetadata().GetDeletionTimestamp() != nil
		return s.created(ctx, cur, nil, curRev, !moved, in)
	}
	return nil, fmt.Errorf("create pod %s: %w", key, errRetry)
}

// pendingPodField is PendingPod.pod.
var pendingPodField = bus.FieldNumber(&pb.PendingPod{}, "pod")

// created hands a stored pod to the schedulers (when queue) and builds the 201 answer. data is the
// pod's stored wire form, when at hand.
func (s *Service) created(ctx context.Context, pod *pb.Pod, data []byte, rev uint64, queue bool, in bus.Meta) (*pb.CommandResult, error) {
	if queue {
		uid := pod.GetMetadata().GetUid()
		subject, mt := bus.PendingSubject(podutil.ConstraintGroup(pod)), meta(pod, fmt.Sprintf("pending-%s-%d", uid, rev), in)
		var err error
		if data == nil {
			data, err = proto.Marshal(pod)
		}
		if err == nil {
			data, err = bus.Splice(&pb.PendingPod{Revision: rev, Cause: causeCreated}, pendingPodField, data)
		}
		if err == nil {
			err = s.batch.PublishEncoded(ctx, subject, data, mt)
		}
		if err != nil {
			return nil, fmt.Errorf("queue created pod %s: %w", uid, err)
		}
	}
	return &pb.CommandResult{Code: http.StatusCreated, Pod: pod, Revision: rev}, nil
}

// update replaces metadata and spec of a pod, keeping what other services own.
func (s *Service) update(ctx context.Context, cmd *pb.PodCommand) (*pb.CommandResult, error) {
	want := cmd.GetPod()
	md := want.GetMetadata()
	key := bus.PodKey(md.GetNamespace(), md.GetName())
	for range maxAttempts {
		cur := &pb.Pod{}
		curRev, err := bus.Get(ctx, s.pods, key, cur)
		if errors.Is(err, bus.ErrNotFound) {
			return notFound(md.GetName()), nil
		}
		if err != nil {
			return nil, fmt.Errorf("update pod %s: %w", key, err)
		}
		if uid := md.GetUid(); uid != "" && uid != cur.GetMetadata().GetUid() {
			return uidMismatch(md.GetName(), uid, cur.GetMetadata().GetUid()), nil
		}
		expected := cmd.GetExpectedRevision()
		if expected != 0 && expected != curRev {
			return modified(md.GetName()), nil
		}
		next := podutil.MergeUpdate(cur, want)
		newRev, err := bus.Update(ctx, s.pods, key, next, curRev)
		if errors.Is(err, bus.ErrConflict) {
			if expected != 0 {
				return modified(md.GetName()), nil
			}
			continue // the client did not pin a revision: apply on top of the newer one
		}
		if err != nil {
			return nil, fmt.Errorf("update pod %s: %w", key, err)
		}
		return &pb.CommandResult{Code: http.StatusOK, Pod: next, Revision: newRev}, nil
	}
	return nil, fmt.Errorf("update pod %s: %w", key, errRetry)
}

// delete removes an unbound pod (or any pod with grace 0) at once, and starts the graceful termination
// of a bound one.
func (s *Service) delete(ctx context.Context, cmd *pb.PodCommand, in bus.Meta) (*pb.CommandResult, error) {
	md := cmd.GetPod().GetMetadata()
	key := bus.PodKey(md.GetNamespace(), md.GetName())
	// deleting is the answer for the pod as this command went to delete it at once. If the pod is gone
	// when the command reads again after a conflict, its deletion is done, not missing: a forced pod's
	// agent reports it gone, and the status service removes it, as soon as deleteNow has marked it.
	var deleting *pb.CommandResult
	for range maxAttempts {
		cur := &pb.Pod{}
		curRev, err := bus.Get(ctx, s.pods, key, cur)
		if errors.Is(err, bus.ErrNotFound) {
			if deleting != nil {
				return deleting, nil
			}
			return notFound(md.GetName()), nil
		}
		if err != nil {
			return nil, fmt.Errorf("delete pod %s: %w", key, err)
		}
		cm := cur.GetMetadata()
		if p := cmd.GetPreconditionUid(); p != "" && p != cm.GetUid() {
			return uidMismatch(md.GetName(), p, cm.GetUid()), nil
		}
		if u := md.GetUid(); u != "" && u != cm.GetUid() {
			// The command is for the pod its sender found under the name, which is gone: a command
			// that waited in the stream must not delete a pod created under the name since.
			if deleting != nil {
				return deleting, nil
			}
			return notFound(md.GetName()), nil
		}
		if r := cmd.GetExpectedRevision(); r != 0 && r != curRev {
			return failure(http.StatusConflict, ReasonConflict, fmt.Sprintf(
				"Operation cannot be fulfilled on pods %q: Precondition failed: ResourceVersion in precondition: %d, ResourceVersion in object meta: %d",
				md.GetName(), r, curRev)), nil
		}
		grace := gracePeriod(cmd, cur)
		node := cur.GetSpec().GetNodeName()
		forced := cm.GetDeletionTimestamp() != nil && cm.GetDeletionGracePeriodSeconds() == 0
		var res *pb.CommandResult
		switch {
		case node == "" || grace == 0 || forced:
			deleting = &pb.CommandResult{Code: http.StatusOK, Pod: cur, Revision: curRev}
			res, err = s.deleteNow(ctx, key, cur, curRev, cmd.GetReason(), in)
		case cm.GetDeletionTimestamp() != nil:
			// Already terminating: the same answer, and the same (deduplicated) message to the agent in
			// case an earlier attempt stopped before sending it.
			if err := s.terminate(ctx, cur, terminationReason(cur), in); err != nil {
				return nil, err
			}
			res = &pb.CommandResult{Code: http.StatusOK, Pod: cur, Revision: curRev}
		default:
			res, err = s.deleteGracefully(ctx, key, cur, curRev, grace, cmd.GetReason(), in)
		}
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		return res, err
	}
	return nil, fmt.Errorf("delete pod %s: %w", key, errRetry)
}

// deleteNow removes the pod from the store. It first marks the pod as deleted with grace 0 and sends the
// follow-up messages, then deletes the key: if anything stops in between, the redelivered command finds
// the marked pod and finishes, and no binder binds a marked pod meanwhile.
func (s *Service) deleteNow(ctx context.Context, key string, cur *pb.Pod, rev uint64, reason string, in bus.Meta) (*pb.CommandResult, error) {
	cm := cur.GetMetadata()
	if cm.GetDeletionTimestamp() == nil || cm.GetDeletionGracePeriodSeconds() != 0 {
		next := proto.Clone(cur).(*pb.Pod)
		next.Metadata.DeletionTimestamp = timestamppb.New(s.now())
		next.Metadata.DeletionGracePeriodSeconds = proto.Int64(0)
		s.markDisruption(next, reason)
		newRev, err := bus.Update(ctx, s.pods, key, next, rev)
		if err != nil {
			return nil, fmt.Errorf("mark pod %s deleted: %w", key, err)
		}
		cur, rev = next, newRev
	}
	node := cur.GetSpec().GetNodeName()
	if node != "" {
		// Bound and forced: the agent still has to clean up.
		if err := s.terminate(ctx, cur, terminationReason(cur), in); err != nil {
			return nil, err
		}
	}
	md := cur.GetMetadata()
	gone := &pb.PodDeleted{Uid: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(), Node: node,
		NominatedNode: cur.GetStatus().GetNominatedNodeName()}
	if err := s.pub.Publish(ctx, bus.SubjPodDeleted, gone, meta(cur, "deleted-"+md.GetUid(), in)); err != nil {
		return nil, fmt.Errorf("announce deletion of %s: %w", key, err)
	}
	if err := bus.Delete(ctx, s.pods, key, rev); err != nil {
		return nil, fmt.Errorf("delete pod %s: %w", key, err)
	}
	return &pb.CommandResult{Code: http.StatusOK, Pod: cur, Revision: rev}, nil
}

// deleteGracefully sets the deletion timestamp of a bound pod and tells its agent to stop it.
func (s *Service) deleteGracefully(ctx context.Context, key string, cur *pb.Pod, rev uint64, grace int64, reason string, in bus.Meta) (*pb.CommandResult, error) {
	next := proto.Clone(cur).(*pb.Pod)
	next.Metadata.DeletionTimestamp = timestamppb.New(s.now().Add(time.Duration(grace) * time.Second))
	next.Metadata.DeletionGracePeriodSeconds = proto.Int64(grace)
	s.markDisruption(next, reason)
	newRev, err := bus.Update(ctx, s.pods, key, next, rev)
	if err != nil {
		return nil, fmt.Errorf("mark pod %s terminating: %w", key, err)
	}
	if err := s.terminate(ctx, next, terminationReason(next), in); err != nil {
		return nil, err
	}
	return &pb.CommandResult{Code: http.StatusOK, Pod: next, Revision: newRev}, nil
}

// Deletion reasons and the condition kube-scheduler sets on a pod it preempts.
const (
	ReasonDeleted               = "Deleted"
	ReasonPreempted             = "Preempted"
	condDisruptionTarget        = "DisruptionTarget"
	reasonPreemptionByScheduler = "PreemptionByScheduler"
	reasonDeletionByTaint       = "DeletionByTaintManager"
	reasonEvictionByAPI         = "EvictionByEvictionAPI"
)

// markDisruption sets DisruptionTarget=True on a pod deleted for a preemption (PreemptionByScheduler,
// as kube-scheduler does before it deletes a victim) or evicted by a NoExecute taint
// (DeletionByTaintManager, as kube's taint-eviction controller does) or through the eviction
// subresource (EvictionByEvictionAPI, as kube-apiserver's eviction does).
func (s *Service) markDisruption(pod *pb.Pod, reason string) {
	var c *pb.PodCondition
	switch reason {
	case ReasonPreempted:
		c = &pb.PodCondition{Type: condDisruptionTarget, Status: podutil.True, Reason: reasonPreemptionByScheduler,
			Message: pod.GetSpec().GetSchedulerName() + ": preempting to accommodate a higher priority pod"}
	case podutil.ReasonTaintManagerEviction:
		c = &pb.PodCondition{Type: condDisruptionTarget, Status: podutil.True, Reason: reasonDeletionByTaint,
			Message: "Taint manager: deleting due to NoExecute taint"}
	case podutil.ReasonEviction:
		c = &pb.PodCondition{Type: condDisruptionTarget, Status: podutil.True, Reason: reasonEvictionByAPI,
			Message: "Eviction API: evicting"}
	default:
		return
	}
	podutil.SetPodCondition(pod, c, s.now())
}

// terminationReason tells the agent why a pod stops: Preempted when the scheduler's preemption
// deleted it (its DisruptionTarget condition says so, also on redelivery), else Deleted.
func terminationReason(pod *pb.Pod) string {
	if c := podutil.PodCondition(pod, condDisruptionTarget); c != nil && c.GetReason() == reasonPreemptionByScheduler {
		return ReasonPreempted
	}
	return ReasonDeleted
}

// terminate tells the pod's node agent to stop it. The message id names the termination request (see
// TerminationMsgID): a redelivered command repeats it, a later, shorter one does not.
func (s *Service) terminate(ctx context.Context, pod *pb.Pod, reason string, in bus.Meta) error {
	md := pod.GetMetadata()
	node := pod.GetSpec().GetNodeName()
	msg := &pb.PodTermination{
		Uid:                md.GetUid(),
		Namespace:          md.GetNamespace(),
		Name:               md.GetName(),
		Node:               node,
		GracePeriodSeconds: md.GetDeletionGracePeriodSeconds(),
		DeletionTimestamp:  md.GetDeletionTimestamp(),
		Reason:             reason,
	}
	if err := s.pub.Publish(ctx, bus.SubjPodTerminate(node), msg, meta(pod, TerminationMsgID(pod), in)); err != nil {
		return fmt.Errorf("ask %s to stop pod %s: %w", node, md.GetUid(), err)
	}
	return nil
}

// TerminationMsgID is the de-duplication id of the termination message for pod as stored: its uid,
// deletion timestamp and grace period, which each termination request (a graceful delete, then a forced
// one) sets anew, so a later request is never dropped as a copy of an earlier one.
func TerminationMsgID(pod *pb.Pod) string {
	md := pod.GetMetadata()
	var at int64
	if ts := md.GetDeletionTimestamp(); ts != nil {
		at = ts.AsTime().UnixNano()
	}
	return fmt.Sprintf("term-%s-%d-%d", md.GetUid(), md.GetDeletionGracePeriodSeconds(), at)
}

// gracePeriod is the client's grace period, else the pod's own, else Kubernetes' default.
func gracePeriod(cmd *pb.PodCommand, pod *pb.Pod) int64 {
	if cmd.GracePeriodSeconds != nil {
		return max(0, cmd.GetGracePeriodSeconds())
	}
	if g := pod.GetSpec().TerminationGracePeriodSeconds; g != nil {
		return max(0, *g)
	}
	return defaultGracePeriod
}

func failure(code int32, reason, message string) *pb.CommandResult {
	return &pb.CommandResult{Code: code, Reason: reason, Message: message}
}

func notFound(name string) *pb.CommandResult {
	return failure(http.StatusNotFound, ReasonNotFound, fmt.Sprintf("pods %q not found", name))
}

func modified(name string) *pb.CommandResult {
	return failure(http.StatusConflict, ReasonConflict, fmt.Sprintf(
		"Operation cannot be fulfilled on pods %q: the object has been modified; please apply your changes to the latest version and try again", name))
}

func uidMismatch(name, want, have string) *pb.CommandResult {
	return failure(http.StatusConflict, ReasonConflict, fmt.Sprintf(
		"Operation cannot be fulfilled on pods %q: Precondition failed: UID in precondition: %s, UID in object meta: %s", name, want, have))
}
