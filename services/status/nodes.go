package status

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/podbus/podbus/internal/ctxtime"
	"github.com/podbus/podbus/internal/events"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Node monitor wording, as the node lifecycle controller writes it.
const (
	reasonNodeStatusUnknown  = "NodeStatusUnknown"
	messageNodeStatusUnknown = "Kubelet stopped posting node status."
)

// handleHeartbeat renews the lease of the node a heartbeat carries, and writes the node when it is
// new, when its status changed, or when the stored one is NodeStatusReportFrequency old.
func (s *Service) handleHeartbeat(ctx context.Context, m *bus.Msg) error {
	// The bus's clock dates the heartbeat, as the node lifecycle controller times the kubelet's
	// heartbeats by its own clock: an agent's clock that steps back must neither make its heartbeats
	// look stale (its node would stay NotReady) nor late to the monitor.
	at := m.Time
	if at.IsZero() {
		at = time.Now()
	}
	name, known := s.knownHeartbeat(m, at)
	var hb pb.NodeHeartbeat
	if !known {
		if err := m.Decode(&hb); err != nil {
			return err
		}
		name = hb.GetNode().GetMetadata().GetName()
		if name == "" {
			return fmt.Errorf("%w: heartbeat without node name", bus.ErrMalformed)
		}
		if m.Subject != bus.SubjHeartbeat(name) {
			return refuse("subject", "heartbeat for node %s on %s", name, m.Subject)
		}
		// A heartbeat from the future would outdate every real one after it until that time.
		horizon := s.horizon(m.Time)
		if sent := heartbeatTime(hb.GetNode()); sent.After(horizon) || hb.GetSentAt().AsTime().After(horizon) {
			return refuse("future", "heartbeat of node %s at %s is after %s", name, sent.Format(time.RFC3339), horizon.Format(time.RFC3339))
		}
		stampHeartbeat(hb.GetNode(), at)
	}
	// A heartbeat the lease already covers is a redelivery or a replay: its status may be older than
	// the node's. The node is written before the lease is renewed, so a heartbeat whose lease renewal
	// failed still finds its node write done when it comes again.
	lease, leaseRev, err := s.viewLease(ctx, name)
	if err != nil {
		return err
	}
	if !at.After(renewTime(lease, s.horizon(time.Time{}))) {
		return nil
	}
	if known {
		metrics.Count("status.heartbeat.by_digest", 1)
	} else if err := s.writeNode(ctx, name, hb.GetNode(), at); err != nil {
		return err
	}
	return s.renewLease(ctx, name, at, lease, leaseRev)
}

// heartbeatHead is what knownHeartbeat decodes of a heartbeat: the node's name, the send time and the
// digest, not the node.
var heartbeatHead = bus.NewMask(&pb.NodeHeartbeat{}, "node.metadata.name", "sent_at", "status_digest")

// knownHeartbeat reads only the head of m and says whether the agent's digest of its status judges it
// unchanged against the node in the view (judgedUnchanged): the common heartbeat of a quiet node, whose
// lease is renewed without decoding the node (most of the message) or digesting it again. ok false
// leaves the heartbeat to the full path: no digest, one not seen at this revision, a report due, or
// anything the full path would refuse. An agent that sends a digest of another status than its node's
// misleads only about its own node, which its heartbeats describe anyway.
func (s *Service) knownHeartbeat(m *bus.Msg, at time.Time) (name string, ok bool) {
	head, ok := bus.Prune(m.Data, heartbeatHead)
	var hb pb.NodeHeartbeat
	if !ok || proto.Unmarshal(head, &hb) != nil {
		return "", false
	}
	name = hb.GetNode().GetMetadata().GetName()
	if len(hb.GetStatusDigest()) != sha256.Size || name == "" || m.Subject != bus.SubjHeartbeat(name) ||
		hb.GetSentAt().AsTime().After(s.horizon(m.Time)) {
		return "", false
	}
	key := bus.NodeKey(name)
	c, ok := s.view.node(key)
	return name, ok && s.judgedUnchanged(key, c, [sha256.Size]byte(hb.GetStatusDigest()), at)
}

// judgedUnchanged says whether a heartbeat with this digest, at at, changes nothing of c, the node under
// key: the same digest was applied, or judged to change nothing, at c's revision; at is after c's
// heartbeat time; and c's report is not NodeStatusReportFrequency old. A stored heartbeat time beyond
// the horizon (accepted before such heartbeats were refused) is never judged unchanged: it must be
// replaced, or it would keep the node alive to the monitor.
func (s *Service) judgedUnchanged(key string, c cachedNode, digest [sha256.Size]byte, at time.Time) bool {
	last := heartbeatTime(c.node)
	return !last.After(s.horizon(time.Time{})) && at.After(last) && at.Sub(last) < s.cfg.NodeStatusReportFrequency &&
		s.view.printedAt(key, c.rev, digest)
}

// writeNode creates the node or applies the heartbeat to it if its status changed or the stored one
// is NodeStatusReportFrequency old. The first attempt judges against the node in the view; after a
// conflict, or without one, it reads the node.
func (s *Service) writeNode(ctx context.Context, name string, hb *pb.Node, at time.Time) error {
	key := bus.NodeKey(name)
	digest, printed := podutil.NodeStatusDigest(hb)
	for attempt := range casAttempts {
		c, ok := s.view.node(key)
		if !ok || attempt > 0 {
			var n pb.Node
			rev, err := bus.Get(ctx, s.nodes, key, &n)
			if errors.Is(err, bus.ErrNotFound) {
				n := newNode(hb)
				rev, err := bus.Create(ctx, s.nodes, key, n)
				if errors.Is(err, bus.ErrExists) {
					continue
				}
				if err == nil {
					s.view.setNode(key, n, rev)
					if printed {
						s.view.setPrint(key, rev, digest) // merging the same heartbeat would change nothing
					}
				}
				return err
			}
			if err != nil {
				return fmt.Errorf("read node %s: %v", name, err) // not wrapped: not this message's fault
			}
			c = cachedNode{node: &n, rev: rev}
			s.view.setNode(key, c.node, c.rev)
		}
		// A stored time beyond the horizon came from a heartbeat accepted before they were refused: it
		// is replaced, or it would keep the node alive to the monitor.
		last := heartbeatTime(c.node)
		future := last.After(s.horizon(time.Time{}))
		if !at.After(last) && !future {
			return nil // older than what is stored (redelivery, replay)
		}
		recent := !future && at.Sub(last) < s.cfg.NodeStatusReportFrequency
		// The same heartbeat, times aside, as one already applied to this revision of the node changes
		// it no more than that one did: nothing to merge or compare.
		if printed && s.judgedUnchanged(key, c, digest, at) {
			metrics.Count("status.heartbeat.lease_only", 1)
			return nil
		}
		next := proto.Clone(c.node).(*pb.Node)
		mergeNode(next, hb)
		if recent && sameButHeartbeat(c.node, next) {
			if printed {
				s.view.setPrint(key, c.rev, digest)
			}
			metrics.Count("status.heartbeat.lease_only", 1)
			return nil
		}
		rev, err := bus.Update(ctx, s.nodes, key, next, c.rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err == nil {
			s.view.setNode(key, next, rev)
			if printed {
				s.view.setPrint(key, rev, digest)
			}
		}
		return err
	}
	return fmt.Errorf("upsert node %s: %w after %d attempts", name, bus.ErrConflict, casAttempts)
}

// newNode is the node an agent registers with its first heartbeat: its labels, and the taints it
// registers with (--register-with-taints), which like the kubelet's apply at registration only.
func newNode(from *pb.Node) *pb.Node {
	n := proto.Clone(from).(*pb.Node)
	if n.Metadata == nil {
		n.Metadata = &pb.ObjectMeta{}
	}
	markAgent(n)
	if n.Metadata.Uid == "" {
		n.Metadata.Uid = uuid.NewString()
	}
	if n.Metadata.CreationTimestamp == nil {
		n.Metadata.CreationTimestamp = timestamppb.Now()
	}
	if n.Spec == nil {
		n.Spec = &pb.NodeSpec{}
	}
	return n
}

// markAgent records that an agent heartbeats for n (the monitor watches only such nodes).
func markAgent(n *pb.Node) {
	if n.Metadata.Annotations == nil {
		n.Metadata.Annotations = map[string]string{}
	}
	n.Metadata.Annotations[podutil.AnnotationAgent] = "true"
}

// mergeNode applies a heartbeat to the stored node: status replaced, the agent's labels set over the
// stored ones (the agent wins for its own keys only; labels users added stay), spec (taints,
// unschedulable: users' and controllers' business after registration) kept except the pod CIDRs the
// agent owns.
func mergeNode(cur, hb *pb.Node) {
	if cur.Metadata == nil {
		cur.Metadata = &pb.ObjectMeta{}
	}
	markAgent(cur)
	if cur.Metadata.Labels == nil {
		cur.Metadata.Labels = map[string]string{}
	}
	for k, v := range hb.GetMetadata().GetLabels() {
		cur.Metadata.Labels[k] = v
	}
	if cur.Spec == nil {
		cur.Spec = &pb.NodeSpec{}
	}
	if c := hb.GetSpec().GetPodCidr(); c != "" {
		cur.Spec.PodCidr = c
		cur.Spec.PodCidrs = append([]string(nil), hb.GetSpec().GetPodCidrs()...)
	}
	st := proto.Clone(hb.GetStatus()).(*pb.NodeStatus)
	for _, c := range st.GetConditions() {
		old := podutil.NodeCondition(cur, c.GetType())
		switch {
		case old == nil || old.LastTransitionTime == nil:
		case old.GetStatus() == c.GetStatus():
			c.LastTransitionTime = old.LastTransitionTime
		case c.LastTransitionTime == nil || c.GetLastTransitionTime().AsTime().Before(old.GetLastTransitionTime().AsTime()):
			// Back from Unknown: the agent's own transition time predates the monitor's.
			c.LastTransitionTime = c.LastHeartbeatTime
		}
	}
	cur.Status = st
}

// stampHeartbeat sets the heartbeat time of every condition of n to at.
func stampHeartbeat(n *pb.Node, at time.Time) {
	ts := timestamppb.New(at)
	for _, c := range n.GetStatus().GetConditions() {
		c.LastHeartbeatTime = ts
	}
}

func heartbeatTime(n *pb.Node) time.Time {
	c := podutil.NodeCondition(n, podutil.NodeReady)
	if c == nil || c.LastHeartbeatTime == nil {
		return time.Time{}
	}
	return c.GetLastHeartbeatTime().AsTime()
}

type cachedNode struct {
	node *pb.Node
	rev  uint64
}

// monitor watches the nodes and leases buckets and, every MonitorInterval, marks Unknown the Ready
// nodes heard of neither through their lease nor their record for NodeMonitorGracePeriod.
// Several replicas may do this at once: the CAS lets one win, and only the winner records the event.
func (s *Service) monitor(ctx context.Context) error {
	ticker := time.NewTicker(s.cfg.MonitorInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		nw, err := s.nodes.WatchAll(ctx)
		if err != nil {
			s.log.Warn("watch nodes failed; retrying", "err", err)
			if !ctxtime.Sleep(ctx, time.Second) {
				break
			}
			continue
		}
		lw, err := s.leases.WatchAll(ctx)
		if err != nil {
			_ = nw.Stop()
			s.log.Warn("watch leases failed; retrying", "err", err)
			if !ctxtime.Sleep(ctx, time.Second) {
				break
			}
			continue
		}
		s.monitorWatch(ctx, nw, lw, ticker.C)
		_ = nw.Stop()
		_ = lw.Stop()
	}
	return nil
}

// monitorWatch feeds the view from the watches until ctx ends or a watch breaks, and judges the nodes
// in it. It judges no node before the leases' initial values are in: a node whose lease it has not
// seen yet would look silent.
func (s *Service) monitorWatch(ctx context.Context, nw, lw jetstream.KeyWatcher, tick <-chan time.Time) {
	leasesSynced := false
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-nw.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue // end of the initial values
			}
			if e.Operation() != jetstream.KeyValuePut {
				s.view.setNode(e.Key(), nil, e.Revision())
				continue
			}
			var n pb.Node
			if err := proto.Unmarshal(e.Value(), &n); err != nil {
				s.log.Warn("undecodable node in store", "key", e.Key(), "err", err)
				continue
			}
			s.view.setNode(e.Key(), &n, e.Revision())
		case e, ok := <-lw.Updates():
			if !ok {
				return
			}
			if e == nil {
				leasesSynced = true
				continue
			}
			key := bus.LeaseNodeKey(e.Key())
			if e.Operation() != jetstream.KeyValuePut {
				s.view.setLease(key, nil, e.Revision())
				continue
			}
			var l pb.NodeLease
			if err := proto.Unmarshal(e.Value(), &l); err != nil {
				s.log.Warn("undecodable lease in store", "key", e.Key(), "err", err)
				continue
			}
			s.view.setLease(key, &l, e.Revision())
		case now := <-tick:
			if !leasesSynced {
				continue
			}
			silent := s.view.nodesWhere(func(n *pb.Node, renewed time.Time) bool { return s.silent(n, renewed, now) })
			for key, c := range silent {
				// The watch may lag behind a renewal: the lease as stored has the last word.
				renewed, err := s.leaseRenewTime(ctx, c.node.GetMetadata().GetName())
				if err == nil && !s.silent(c.node, renewed, now) {
					continue
				}
				if err := s.markUnknown(ctx, key, c, now); err != nil && ctx.Err() == nil {
					s.log.Warn("mark node unknown", "node", c.node.GetMetadata().GetName(), "err", err)
				}
			}
		}
	}
}

// markUnknown sets every condition of a silent node to Unknown (CAS on the revision it was seen at).
func (s *Service) markUnknown(ctx context.Context, key string, c cachedNode, now time.Time) error {
	n := proto.Clone(c.node).(*pb.Node)
	ts := timestamppb.New(now)
	for _, cond := range n.GetStatus().GetConditions() {
		cond.Status = podutil.Unknown
		cond.Reason = reasonNodeStatusUnknown
		cond.Message = messageNodeStatusUnknown
		cond.LastTransitionTime = ts
	}
	rev, err := bus.Update(ctx, s.nodes, key, n, c.rev)
	if errors.Is(err, bus.ErrConflict) {
		return nil // a heartbeat or another replica got there first; the watch brings the new state
	}
	if err != nil {
		return err
	}
	// The next heartbeat must find the node Unknown, not the Ready the watch has not replaced yet.
	s.view.setNode(key, n, rev)
	name := n.GetMetadata().GetName()
	rec := events.NewRecorder(s.events, "node-controller", s.cfg.ID)
	obj := &pb.ObjectReference{Kind: "Node", ApiVersion: "v1", Name: name, Uid: n.GetMetadata().GetUid()}
	f, err := rec.Event(obj, "Normal", "NodeNotReady", fmt.Sprintf("Node %s status is now: NodeNotReady", name),
		fmt.Sprintf("%s-%d", name, c.rev), now)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return bus.Wait(wctx, f)
}
