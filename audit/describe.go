package audit

import (
	"fmt"
	"strings"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Describe says in a few words what a record is.
func Describe(r *Record) string {
	s, _ := step(r, nil)
	return s.What
}

// step describes r as a timeline step. prev is the pod's previous state (pods bucket records only);
// the returned pod is the state after r (nil unless r is a pods record).
func step(r *Record, prev *pb.Pod) (Step, *pb.Pod) {
	st := Step{Seq: r.Seq, Index: r.Index, Time: r.Time, Subject: r.Subject, Actor: r.Actor()}
	st.Service, _, _ = strings.Cut(st.Actor, "/")
	if bucket, key, ok := r.Bucket(); ok {
		return bucketStep(st, r, bucket, key, prev)
	}
	m, err := r.Decode()
	if err != nil || m == nil {
		st.What = fmt.Sprintf("%d bytes", len(r.Data))
		if err != nil {
			st.What = "undecodable: " + err.Error()
		}
		return st, nil
	}
	switch m := m.(type) {
	case *pb.PodCommand:
		op := strings.ToLower(strings.TrimPrefix(m.GetOp().String(), "OP_"))
		user := m.GetUser()
		if user == "" {
			user = r.Header.Get(bus.HdrUser)
		}
		if user == "" {
			user = "anonymous"
		}
		st.Kind = "admitted"
		if op != "create" {
			st.Kind = op + " requested"
		}
		st.What = fmt.Sprintf("%s by user %s", st.Kind, user)
		if o := controllerOf(m.GetPod()); o != nil {
			st.What += fmt.Sprintf(" for %s/%s", o.GetKind(), o.GetName())
		}
		if r := m.GetReason(); r != "" {
			st.What += ": " + r
		}
	case *pb.PendingPod:
		st.Kind, st.What = "queued", fmt.Sprintf("queued for scheduling (%s, rv=%d)", m.GetCause(), m.GetRevision())
	case *pb.SchedulingDecision:
		if m.GetUnschedulable() {
			st.Kind, st.What = "unschedulable", "unschedulable: "+m.GetMessage()
		} else {
			st.Kind = "scheduled"
			st.What = fmt.Sprintf("scheduled on node %s (score %d; %d nodes evaluated)", m.GetNode(), m.GetScore(), m.GetNodesEvaluated())
		}
	case *pb.PodBinding:
		st.Kind, st.What = "handed", fmt.Sprintf("handed to agent %s rv=%d", m.GetNode(), m.GetRevision())
	case *pb.PodTermination:
		st.Kind, st.What = "terminate", fmt.Sprintf("told agent %s to stop it (grace %ds)", m.GetNode(), m.GetGracePeriodSeconds())
	case *pb.PodDeleted:
		st.Kind, st.What = "released", "gone from the store: reservation released"
	case *pb.PodStatusReport:
		st.Kind = "report"
		st.What = "reports " + podPhase(m.GetStatus())
		if m.GetGone() {
			st.What = "reports the pod stopped and cleaned up"
		}
	case *pb.Event:
		src := m.GetSource().GetComponent()
		if h := m.GetSource().GetHost(); h != "" {
			src += " " + h
		}
		st.Kind, st.Reason = "event", m.GetReason()
		switch {
		case m.GetEventTime() != nil:
			st.EventTime = m.GetEventTime().AsTime()
		case m.GetFirstTimestamp() != nil:
			st.EventTime = m.GetFirstTimestamp().AsTime()
		}
		st.What = fmt.Sprintf("event %s %s: %s (%s)", m.GetType(), m.GetReason(), m.GetMessage(), src)
	case *pb.NodeHeartbeat:
		st.What = "heartbeat of " + m.GetNode().GetMetadata().GetName()
	}
	return st, nil
}

// controllerOf is the owner reference of p marked as its controller, if any: who a controller's
// command was for.
func controllerOf(p *pb.Pod) *pb.OwnerReference {
	for _, o := range p.GetMetadata().GetOwnerReferences() {
		if o.GetController() {
			return o
		}
	}
	return nil
}

func podPhase(s *pb.PodStatus) string {
	out := s.GetPhase()
	for _, c := range s.GetConditions() {
		if c.GetType() == podutil.PodReady && c.GetStatus() == podutil.True {
			out += ", ready"
		}
	}
	if ip := s.GetPodIp(); ip != "" {
		out += " " + ip
	}
	for _, cs := range s.GetContainerStatuses() {
		if w := cs.GetState().GetWaiting(); w != nil {
			out += " (" + cs.GetName() + ": " + w.GetReason() + ")"
		}
	}
	return out
}

// bucketStep describes a bucket record. Bucket writes carry no actor: for pods it is inferred from
// what changed, as only one service makes each kind of change (docs/design.md).
func bucketStep(st Step, r *Record, bucket, key string, prev *pb.Pod) (Step, *pb.Pod) {
	_, rev, _ := r.Origin()
	if bucket != bus.BucketPods {
		st.What = fmt.Sprintf("%s/%s written rv=%d", bucket, key, rev)
		if r.Deleted() {
			st.What = fmt.Sprintf("%s/%s deleted", bucket, key)
		}
		return st, nil
	}
	if r.Deleted() {
		st.Service, st.Kind = "store", "deleted"
		if prev.GetSpec().GetNodeName() != "" {
			st.Service = "status"
		}
		st.What = fmt.Sprintf("deleted from the store rv=%d", rev)
		return st, nil
	}
	m, err := r.Decode()
	p, _ := m.(*pb.Pod)
	if err != nil || p == nil {
		st.What = "undecodable pod record"
		return st, prev
	}
	ready := func(p *pb.Pod) bool {
		c := podutil.PodCondition(p, podutil.PodReady)
		return c != nil && c.GetStatus() == podutil.True
	}
	sched := func(p *pb.Pod) string {
		c := podutil.PodCondition(p, podutil.PodScheduled)
		return c.GetStatus() + c.GetReason()
	}
	switch {
	case prev == nil || prev.GetMetadata().GetUid() != p.GetMetadata().GetUid():
		st.Service, st.Kind, st.What = "store", "stored", fmt.Sprintf("stored rv=%d", rev)
	case prev.GetSpec().GetNodeName() == "" && p.GetSpec().GetNodeName() != "":
		st.Service, st.Kind, st.What = "binder", "bound", fmt.Sprintf("bound to node %s rv=%d", p.GetSpec().GetNodeName(), rev)
	case p.GetMetadata().GetDeletionTimestamp() != nil && prev.GetMetadata().GetDeletionTimestamp() == nil:
		st.Service, st.Kind, st.What = "store", "terminating", fmt.Sprintf("deletion requested rv=%d", rev)
	case sched(p) != sched(prev) && p.GetSpec().GetNodeName() == "":
		c := podutil.PodCondition(p, podutil.PodScheduled)
		st.Service, st.Kind, st.What = "binder", "unschedulable", fmt.Sprintf("marked %s: %s rv=%d", c.GetReason(), c.GetMessage(), rev)
	case ready(p) && !ready(prev):
		st.Service, st.Kind, st.What = "status", "ready", fmt.Sprintf("%s rv=%d", podPhase(p.GetStatus()), rev)
	case p.GetStatus().GetPhase() == "Running" && prev.GetStatus().GetPhase() != "Running":
		st.Service, st.Kind, st.What = "status", "running", fmt.Sprintf("%s rv=%d", podPhase(p.GetStatus()), rev)
	default:
		st.Service, st.Kind, st.What = "status", "status", fmt.Sprintf("%s rv=%d", podPhase(p.GetStatus()), rev)
	}
	if st.Actor == "" && st.Service != "" {
		st.Actor = st.Service
		if node := p.GetSpec().GetNodeName(); st.Service == "status" && node != "" {
			st.Actor = "status (agent " + node + ")"
		}
	}
	return st, p
}
