package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Node leases, as Kubernetes' kubelet keeps them in kube-node-lease: a heartbeat renews a small record
// that only the node monitor watches, so the node record, which every scheduler, binder and API watch
// decodes, changes only when the node's status does.

// leaseRenewTime is the renew time of name's lease, zero if it has none or if it lies beyond the
// horizon of now (a lease must not stay frozen by one).
func (s *Service) leaseRenewTime(ctx context.Context, name string) (time.Time, error) {
	l, _, err := s.readLease(ctx, name)
	if err != nil {
		return time.Time{}, err
	}
	return renewTime(l, s.horizon(time.Time{})), nil
}

// readLease reads name's lease and its revision; nil and 0 if it has none.
func (s *Service) readLease(ctx context.Context, name string) (*pb.NodeLease, uint64, error) {
	var l pb.NodeLease
	rev, err := bus.Get(ctx, s.leases, bus.LeaseKey(name), &l)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read lease %s: %v", name, err) // not wrapped: not this message's fault
	}
	return &l, rev, nil
}

// renewTime is l's renew time, zero when it lies beyond horizon.
func renewTime(l *pb.NodeLease, horizon time.Time) time.Time {
	if l.GetRenewTime() == nil {
		return time.Time{}
	}
	t := l.GetRenewTime().AsTime()
	if t.After(horizon) {
		return time.Time{}
	}
	return t
}

// renewLease sets name's lease's renew time to at: creates the lease if absent, else updates it at the
// revision read; a renew time not after the stored one changes nothing. cur and rev are the lease as
// last read (nil: none), so that the usual renewal reads nothing more. The node holds its lease, as
// the kubelet does, though the status service renews it for the agent, which writes no bucket.
func (s *Service) renewLease(ctx context.Context, name string, at time.Time, cur *pb.NodeLease, rev uint64) error {
	key := bus.LeaseKey(name)
	l := &pb.NodeLease{Node: name, RenewTime: timestamppb.New(at), HolderIdentity: name,
		LeaseDurationSeconds: int32(s.cfg.NodeMonitorGracePeriod / time.Second)}
	for attempt := range casAttempts {
		if attempt > 0 {
			var err error
			if cur, rev, err = s.readLease(ctx, name); err != nil {
				return err
			}
		}
		if cur == nil {
			_, err := bus.Create(ctx, s.leases, key, l)
			if errors.Is(err, bus.ErrExists) {
				continue
			}
			return err
		}
		if !at.After(renewTime(cur, s.horizon(time.Time{}))) {
			return nil
		}
		_, err := bus.Update(ctx, s.leases, key, l, rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		return err
	}
	return fmt.Errorf("renew lease %s: %w after %d attempts", name, bus.ErrConflict, casAttempts)
}

// sameButHeartbeat says whether a and b differ in nothing but their conditions' heartbeat times. It
// compares them in place, with those times set aside and put back, rather than cloning two nodes for
// every heartbeat: the caller must be their only user meanwhile.
func sameButHeartbeat(a, b *pb.Node) bool {
	type saved struct {
		c  *pb.NodeCondition
		at *timestamppb.Timestamp
	}
	var keep []saved
	for _, n := range []*pb.Node{a, b} {
		for _, c := range n.GetStatus().GetConditions() {
			keep = append(keep, saved{c, c.LastHeartbeatTime})
		}
	}
	for _, k := range keep {
		k.c.LastHeartbeatTime = nil
	}
	same := proto.Equal(a, b)
	for _, k := range keep {
		k.c.LastHeartbeatTime = k.at
	}
	return same
}

// lastHeard is when the node was last heard of: the later of its heartbeat time and its lease's
// renew time.
func lastHeard(n *pb.Node, renewed time.Time) time.Time {
	if hb := heartbeatTime(n); hb.After(renewed) {
		return hb
	}
	return renewed
}

// silent says whether the node, Ready and heartbeating through an agent, has not been heard of for
// NodeMonitorGracePeriod at now.
func (s *Service) silent(n *pb.Node, renewed, now time.Time) bool {
	if n.GetMetadata().GetAnnotations()[podutil.AnnotationAgent] == "" {
		return false // registered without an agent (kwok-style): nobody is expected to heartbeat
	}
	return podutil.NodeIsReady(n) && now.Sub(lastHeard(n, renewed)) > s.cfg.NodeMonitorGracePeriod
}
