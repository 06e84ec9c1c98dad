package status

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/podbus/podbus/internal/events"
	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/internal/reportseq"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// outcome is what applying a report did to the store.
type outcome int

const (
	ignored outcome = iota // stale, or for another pod
	applied                // status written
	removed                // pod deleted (gone), or already absent for a gone report
)

// handleReport applies one agent report, then records its events and, for gone pods, publishes
// pod.deleted; it acks only once those publishes are stored.
func (s *Service) handleReport(ctx context.Context, m *bus.Msg) error {
	var rep pb.PodStatusReport
	if err := m.Decode(&rep); err != nil {
		return err
	}
	if rep.GetUid() == "" || rep.GetNamespace() == "" || rep.GetName() == "" || rep.GetNode() == "" {
		return fmt.Errorf("%w: status report without uid, namespace, name or node", bus.ErrMalformed)
	}
	if !rep.GetGone() && rep.GetStatus() == nil {
		return fmt.Errorf("%w: status report for %s/%s without status", bus.ErrMalformed, rep.GetNamespace(), rep.GetName())
	}
	if m.Subject != bus.SubjPodStatus(rep.GetNode()) {
		return refuse("subject", "report of node %s for pod %s/%s on %s", rep.GetNode(), rep.GetNamespace(), rep.GetName(), m.Subject)
	}
	// seq starts from the agent's boot time (internal/reportseq): one dated far ahead would make every
	// later report look stale and freeze the pod's status.
	if horizon := s.horizon(m.Time); reportseq.After(rep.GetSeq(), horizon) {
		return refuse("future", "report seq %d of pod %s/%s is dated %s, after %s", rep.GetSeq(), rep.GetNamespace(), rep.GetName(),
			reportseq.Epoch(rep.GetSeq()).Format(time.RFC3339), horizon.Format(time.RFC3339))
	}
	res, correlation, err := s.applyReport(ctx, &rep)
	if err != nil {
		return err
	}
	if correlation == "" {
		correlation = m.Meta.Correlation
	}
	var futures []jetstream.PubAckFuture
	// Events are recorded even for stale reports: a redelivered report may have been applied before its
	// events were stored. The recorder's dedup gives a second recording the first one's name, so it is
	// stored once when alone (message id) and listed once when batched.
	rec := events.NewRecorder(s.events, "kubelet", rep.GetNode())
	for i, ev := range rep.GetEvents() {
		obj := &pb.ObjectReference{Kind: "Pod", ApiVersion: "v1", Namespace: rep.GetNamespace(), Name: rep.GetName(),
			Uid: rep.GetUid(), FieldPath: ev.GetFieldPath()}
		var at time.Time
		if ev.GetAt() != nil {
			at = ev.GetAt().AsTime()
		}
		typ := ev.GetType()
		if typ == "" {
			typ = "Normal"
		}
		f, err := rec.Event(obj, typ, ev.GetReason(), ev.GetMessage(), fmt.Sprintf("%s-%d-%d", rep.GetUid(), rep.GetSeq(), i), at)
		if err != nil {
			return fmt.Errorf("record event %s of pod %s/%s: %w", ev.GetReason(), rep.GetNamespace(), rep.GetName(), err)
		}
		futures = append(futures, f)
	}
	if res == removed {
		f, err := s.pub.PublishAsync(bus.SubjPodDeleted,
			&pb.PodDeleted{Uid: rep.GetUid(), Namespace: rep.GetNamespace(), Name: rep.GetName(), Node: rep.GetNode()},
			bus.Meta{MsgID: "deleted-" + rep.GetUid(), Correlation: correlation, PodUID: rep.GetUid(),
				Key: rep.GetNamespace() + "/" + rep.GetName()})
		if err != nil {
			return err
		}
		futures = append(futures, f)
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		return err
	}
	switch res {
	case applied:
		metrics.Count("status.applied", 1)
	case removed:
		metrics.Count("status.removed", 1)
	default:
		metrics.Count("status.stale", 1)
	}
	return nil
}

// reportMask is what applying a report reads of a stored pod. The rest of the pod (its spec above all)
// is neither decoded nor encoded again: the new status and bookkeeping replace the old in the stored
// bytes (bus.ReplaceFields).
var reportMask = bus.NewMask(&pb.Pod{}, "metadata.uid", "spec.node_name", "status.conditions",
	"status.nominated_node_name", "status.qos_class", "internal")

var (
	podStatusField   = bus.FieldNumber(&pb.Pod{}, "status")
	podInternalField = bus.FieldNumber(&pb.Pod{}, "internal")
)

// storedPod is a stored pod: its bytes at a revision, and the part of it reportMask names, decoded.
type storedPod struct {
	data []byte
	rev  uint64
	head *pb.Pod
}

func decodeStored(data []byte, rev uint64) (storedPod, error) {
	pruned, ok := bus.Prune(data, reportMask)
	if !ok {
		return storedPod{}, bus.ErrMalformed
	}
	head := &pb.Pod{}
	if err := proto.Unmarshal(pruned, head); err != nil {
		return storedPod{}, errors.Join(bus.ErrMalformed, err)
	}
	return storedPod{data: data, rev: rev, head: head}, nil
}

// readPod reads the pod at key from the bucket.
func (s *Service) readPod(ctx context.Context, key string) (storedPod, error) {
	data, rev, err := bus.GetEncoded(ctx, s.pods, key)
	if err != nil {
		return storedPod{}, err
	}
	return decodeStored(data, rev)
}

// applyReport writes the report into the pod with compare-and-set and says what it did, with the pod's
// correlation id when it was found.
func (s *Service) applyReport(ctx context.Context, rep *pb.PodStatusReport) (outcome, string, error) {
	key := bus.PodKey(rep.GetNamespace(), rep.GetName())
	st := reported(rep)
	for attempt := range casAttempts {
		// The pod as this replica last wrote it saves a read when it is still current (the usual case:
		// one pod's reports go to one worker); anything but a plain apply is decided on a fresh read.
		if attempt == 0 && !rep.GetGone() {
			if p, ok := s.last.get(key, rep.GetUid()); ok && rep.GetSeq() > s.storedSeq(p.head) &&
				p.head.GetSpec().GetNodeName() == rep.GetNode() {
				err := s.writeStatus(ctx, key, p, st)
				if err == nil {
					return applied, p.head.GetInternal().GetCorrelationId(), nil
				}
				s.last.forget(key)
				if !errors.Is(err, bus.ErrConflict) {
					return ignored, "", err
				}
				continue
			}
		}
		p, err := s.readPod(ctx, key)
		if errors.Is(err, bus.ErrNotFound) {
			s.last.forget(key)
			return goneOrIgnored(rep), "", nil
		}
		if err != nil {
			// Not wrapped: an undecodable stored pod is not this message's fault, so it must not be parked.
			return ignored, "", fmt.Errorf("read pod %s: %v", key, err)
		}
		pod := p.head
		corr := pod.GetInternal().GetCorrelationId()
		if pod.GetMetadata().GetUid() != rep.GetUid() {
			return goneOrIgnored(rep), corr, nil
		}
		if n := pod.GetSpec().GetNodeName(); n != rep.GetNode() {
			// The binder stores the binding before it hands the pod to the node's agent, so no honest
			// agent reports a pod that is not bound to its node.
			return ignored, corr, refuse("not_bound", "report of node %s for pod %s bound to %q", rep.GetNode(), key, n)
		}
		if rep.GetSeq() <= s.storedSeq(pod) {
			return ignored, corr, nil
		}
		if rep.GetGone() {
			s.last.forget(key)
			err := bus.Delete(ctx, s.pods, key, p.rev)
			if errors.Is(err, bus.ErrConflict) {
				continue
			}
			if err != nil {
				return ignored, corr, err
			}
			return removed, corr, nil
		}
		err = s.writeStatus(ctx, key, p, st)
		if errors.Is(err, bus.ErrConflict) {
			metrics.Count("kv.conflicts.status", 1)
			metrics.CASConflicts.WithLabelValues(bus.BucketPods).Inc()
			continue
		}
		if err != nil {
			return ignored, corr, err
		}
		return applied, corr, nil
	}
	return ignored, "", fmt.Errorf("apply status of pod %s: %w after %d attempts", key, bus.ErrConflict, casAttempts)
}

// writeStatus merges a into p and compare-and-sets the result at p's revision, replacing only the
// status and bookkeeping in the stored bytes; it keeps what it wrote in the write-back cache.
func (s *Service) writeStatus(ctx context.Context, key string, p storedPod, a agentStatus) error {
	pod := p.head
	wasReady := isReady(pod)
	mergeStatus(pod, a)
	st, err := proto.Marshal(pod.GetStatus())
	if err != nil {
		return err
	}
	in, err := proto.Marshal(pod.GetInternal())
	if err != nil {
		return err
	}
	// Marshal gives nil for an empty message, which ReplaceFields would take for an absent one.
	data, ok := bus.ReplaceFields(p.data, bus.RawField{Num: podStatusField, Value: nonNil(st)},
		bus.RawField{Num: podInternalField, Value: nonNil(in)})
	if !ok {
		return fmt.Errorf("pod %s: %w", key, bus.ErrMalformed)
	}
	newRev, err := bus.UpdateEncoded(ctx, s.pods, key, data, p.rev)
	if err != nil {
		return err
	}
	s.last.put(key, pod.GetMetadata().GetUid(), data, newRev)
	observeReady(wasReady, pod)
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// horizon is the latest time an agent may stamp a message the stream stored at stored (zero: now).
func (s *Service) horizon(stored time.Time) time.Time {
	if stored.IsZero() {
		stored = time.Now()
	}
	return stored.Add(s.cfg.MaxClockSkew)
}

// storedSeq is the pod's last applied report seq, or 0 when that lies beyond the horizon of now (written
// before reports from the future were refused): a pod must not stay frozen by one.
func (s *Service) storedSeq(pod *pb.Pod) uint64 {
	seq := pod.GetInternal().GetReportSeq()
	if reportseq.After(seq, s.horizon(time.Time{})) {
		return 0
	}
	return seq
}

func goneOrIgnored(rep *pb.PodStatusReport) outcome {
	if rep.GetGone() {
		return removed
	}
	return ignored
}

// agentStatus is a report's status and seq. Each compare-and-set attempt merges the status into
// another read of the pod; the report's own conditions and qosClass are kept aside, as the agent sent
// them, so that every merge starts from those and the status need not be copied for each.
type agentStatus struct {
	st    *pb.PodStatus
	conds []*pb.PodCondition
	qos   string
	seq   uint64
}

// reported takes rep's status for merging: rep must not be used for its status afterwards.
func reported(rep *pb.PodStatusReport) agentStatus {
	st := rep.GetStatus()
	return agentStatus{st: st, conds: st.GetConditions(), qos: st.GetQosClass(), seq: rep.GetSeq()}
}

// mergeStatus replaces the pod's status with the agent's, keeping what the control plane owns:
// the PodScheduled condition, nominatedNodeName and qosClass.
func mergeStatus(pod *pb.Pod, a agentStatus) {
	old := pod.GetStatus()
	st := a.st
	if st == nil {
		st = &pb.PodStatus{}
	}
	st.Conditions = a.conds
	if sched := podutil.PodCondition(pod, podutil.PodScheduled); sched != nil {
		conds := make([]*pb.PodCondition, len(a.conds), len(a.conds)+1)
		replaced := false
		for i, c := range a.conds {
			conds[i] = c
			if c.GetType() == podutil.PodScheduled {
				conds[i] = sched
				replaced = true
			}
		}
		if !replaced {
			conds = append(conds, sched)
		}
		st.Conditions = conds
	}
	st.NominatedNodeName = old.GetNominatedNodeName()
	st.QosClass = a.qos
	if q := old.GetQosClass(); q != "" {
		st.QosClass = q
	}
	pod.Status = st
	if pod.Internal == nil {
		pod.Internal = &pb.PodInternal{}
	}
	pod.Internal.ReportSeq = a.seq
}

// podCache holds the pods this replica wrote last, as stored, with their revisions. It is a hint:
// writes are still compare-and-set, and a conflict drops the entry. Pods are kept encoded: a decoded
// pod costs several times its encoding, and every pod of the cluster passes through here.
//
// A pod's reports come close together (ContainerCreating, Running, Ready), then rarely, so the cache
// keeps recent writes only: two generations of at most maxCachedPods each; when the current one is
// full it becomes the previous one and the oldest is dropped. A pod written shortly before the switch
// is still found in the previous generation, and a pod written long ago costs a read.
type podCache struct {
	mu        sync.Mutex
	cur, prev map[string]cachedPod
}

type cachedPod struct {
	uid  string
	data []byte
	rev  uint64
}

// maxCachedPods is the size of a generation.
const maxCachedPods = 4096

// get returns the cached pod, decoded afresh for the caller, if it is the incarnation uid.
func (c *podCache) get(key, uid string) (storedPod, bool) {
	c.mu.Lock()
	e, ok := c.cur[key]
	if !ok {
		e, ok = c.prev[key]
	}
	c.mu.Unlock()
	if !ok || e.uid != uid {
		return storedPod{}, false
	}
	p, err := decodeStored(e.data, e.rev)
	return p, err == nil
}

// put keeps data, the encoding of incarnation uid of the pod at key, as written at rev.
func (c *podCache) put(key, uid string, data []byte, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || len(c.cur) >= maxCachedPods {
		c.prev, c.cur = c.cur, make(map[string]cachedPod, maxCachedPods)
	}
	delete(c.prev, key)
	c.cur[key] = cachedPod{uid: uid, data: data, rev: rev}
}

func (c *podCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, key)
	delete(c.prev, key)
}

func isReady(p *pb.Pod) bool {
	c := podutil.PodCondition(p, podutil.PodReady)
	return c != nil && c.GetStatus() == podutil.True
}

// observeReady observes the ready stage (binding committed to Ready written) when a write turns the pod
// Ready; a pod whose readiness fails and recovers is observed again.
func observeReady(wasReady bool, p *pb.Pod) {
	if wasReady || !isReady(p) {
		return
	}
	if c := podutil.PodCondition(p, podutil.PodScheduled); c.GetLastTransitionTime() != nil {
		metrics.StageReady.Since(c.GetLastTransitionTime().AsTime())
	}
}
