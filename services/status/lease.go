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

// viewLease is name's lease and its revision as in the view, else as stored (nil and 0 if none).
func (s *Service) viewLease(ctx context.Context, name string) (*pb.NodeLease, uint64, error) {
	key := bus.NodeKey(name)
	if c, ok := s.view.lease(key); ok {
		return c.lease, c.rev, nil
	}
	l, rev, err := s.readLease(ctx, name)
	if err == nil && l != nil {
		s.view.setLease(key, l, rev)
	}
	return l, rev, err
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
		var err error
		if cur == nil {
			rev, err = bus.Create(ctx, s.leases, key, l)
			if errors.Is(err, bus.ErrExists) {
				continue
			}
		} else {
			if !at.After(renewTime(cur, s.horizon(time.Time{}))) {
				return nil
			}
			rev, err = bus.Update(ctx, s.leases, key, l, rev)
			if errors.Is(err, bus.ErrConflict) {
				continue
			}
		}
		if err == nil {
			s.view.setLease(bus.NodeKey(name), l, rev)
		}
		return err
	}
	return fmt.Errorf("renew lease %s: %w after %d attempts", name, bus.ErrConflict, casAttempts)
}

// sameButHeartbeat says whether a and b differ in nothing but their conditions' heartbeat times. It
// compares them in place rather than cloning two nodes for every heartbeat: b's heartbeat times are
// set to a's for the comparison and put back, so a is only read (it may be the shared cached node)
// and b must be the caller's alone meanwhile.
func sameButHeartbeat(a, b *pb.Node) bool {
	ac, bc := a.GetStatus().GetConditions(), b.GetStatus().GetConditions()
	if len(ac) != len(bc) {
		return false
	}
	saved := make([]*timestamppb.Timestamp, len(bc))
	for i, c := range bc {
		saved[i] = c.LastHeartbeatTime
		if c != ac[i] {
			c.LastHeartbeatTime = ac[i].LastHeartbeatTime
		}
	}
	same := proto.Equal(a, b)
	for i, c := range bc {
		if c != ac[i] {
			c.LastHeartbeatTime = saved[i]
		}
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
