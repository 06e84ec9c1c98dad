package binder

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// reservation is the outcome of reserve.
type reservation int

const (
	reservationAdded  reservation = iota // the pod's requests were added to the node's total
	reservationHeld                      // the pod already had a reservation there (redelivery, or a twin decision)
	reservationNoNode                    // the node is unknown
	reservationNotReady
	reservationNoRoom
)

func (r reservation) ok() bool { return r == reservationAdded || r == reservationHeld }

func (r reservation) String() string {
	return [...]string{"added", "held", "node unknown", "node not ready", "insufficient resources"}[r]
}

// reserve commits the pod's requests on node if they fit its allocatable. It is idempotent: a pod that
// already holds a reservation on node keeps it, whatever happened to the node since.
func (s *Service) reserve(ctx context.Context, node string, pod *pb.Pod) (reservation, error) {
	uid := pod.GetMetadata().GetUid()
	key := bus.NodeKey(node)
	req := podutil.PodRequests(pod)
	for range maxAttempts {
		a, rev, err := s.allocation(ctx, node)
		if err != nil {
			return 0, err
		}
		if _, ok := a.Pods[uid]; ok {
			return reservationHeld, nil
		}
		// Looked up on every attempt: a node can go NotReady while we lose compare-and-sets.
		n, err := s.node(ctx, node)
		if errors.Is(err, bus.ErrNotFound) {
			return reservationNoNode, nil
		}
		if err != nil {
			return 0, err
		}
		if !podutil.NodeIsReady(n) {
			return reservationNotReady, nil
		}
		if short := podutil.Insufficient(podutil.NodeAllocatable(n), a.GetTotal(), req); len(short) > 0 {
			s.log.Debug("no room", "pod", uid, "node", node, "insufficient", strings.Join(short, ","))
			return reservationNoRoom, nil
		}
		a.Pods[uid] = &pb.PodAllocation{
			Namespace: pod.GetMetadata().GetNamespace(),
			Name:      pod.GetMetadata().GetName(),
			Requests:  req,
		}
		a.Total = total(a)
		_, err = bus.Update(ctx, s.b.Alloc, key, a, rev) // rev 0: create the record
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("reserve pod %s on %s: %w", uid, node, err)
		}
		return reservationAdded, nil
	}
	return 0, fmt.Errorf("reserve pod %s on %s: %w", uid, node, errRetry)
}

// release removes the pod's reservation from node, if it has one (idempotent).
func (s *Service) release(ctx context.Context, node, uid string) error {
	if node == "" {
		return nil
	}
	key := bus.NodeKey(node)
	for range maxAttempts {
		a, rev, err := s.allocation(ctx, node)
		if err != nil {
			return err
		}
		if _, ok := a.Pods[uid]; !ok || rev == 0 {
			return nil
		}
		delete(a.Pods, uid)
		a.Total = total(a)
		_, err = bus.Update(ctx, s.b.Alloc, key, a, rev)
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("release pod %s on %s: %w", uid, node, err)
		}
		return nil
	}
	return fmt.Errorf("release pod %s on %s: %w", uid, node, errRetry)
}

// allocation reads a node's record and its revision; an empty record at revision 0 when there is none.
func (s *Service) allocation(ctx context.Context, node string) (*pb.NodeAllocation, uint64, error) {
	a := &pb.NodeAllocation{}
	rev, err := bus.Get(ctx, s.b.Alloc, bus.NodeKey(node), a)
	if errors.Is(err, bus.ErrNotFound) {
		a, rev = &pb.NodeAllocation{}, 0
	} else if err != nil {
		return nil, 0, fmt.Errorf("read allocation of %s: %w", node, err)
	}
	a.Node = node
	if a.Pods == nil {
		a.Pods = map[string]*pb.PodAllocation{}
	}
	return a, rev, nil
}

// total is recomputed from the pods rather than adjusted, so it can never drift from them.
func total(a *pb.NodeAllocation) *pb.Resources {
	t := &pb.Resources{}
	for _, p := range a.GetPods() {
		podutil.Add(t, p.GetRequests())
	}
	return t
}
