package status

import (
	"sync"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// nodeView is the nodes and their leases as this replica last saw them: from the monitor's watches
// and from its own writes. A heartbeat that changes nothing but the heartbeat times is judged against
// it and renews the lease at the revision it holds, reading nothing, as the kubelet compares its
// status with its informer's copy of the node. Writes stay compare-and-set at the revision in the
// view, so a stale view costs a conflict and a read, never a lost or doubled write. A view that lags
// another writer (the monitor of another replica marking the node Unknown) can let a heartbeat skip a
// node write it needed; the next heartbeat, after the watch, makes it.
//
// The nodes and leases in the view are shared: nobody changes them once they are in.
type nodeView struct {
	mu     sync.Mutex
	nodes  map[string]cachedNode  // node key -> node; node nil: deleted at rev
	leases map[string]cachedLease // node key -> its lease; lease nil: deleted at rev
}

type cachedLease struct {
	lease *pb.NodeLease
	rev   uint64
}

func newNodeView() *nodeView {
	return &nodeView{nodes: map[string]cachedNode{}, leases: map[string]cachedLease{}}
}

// node is the node stored under key as last seen, ok false if none is known.
func (v *nodeView) node(key string) (cachedNode, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.nodes[key]
	return c, ok && c.node != nil
}

// setNode records n at rev (nil: deleted) unless the view holds a later revision. At the same revision
// the newer copy replaces the older, so that the view and the monitor share the watch's.
func (v *nodeView) setNode(key string, n *pb.Node, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.nodes[key]; ok && c.rev > rev {
		return
	}
	v.nodes[key] = cachedNode{node: n, rev: rev}
}

// lease is the lease of the node stored under key as last seen, ok false if none is known.
func (v *nodeView) lease(key string) (cachedLease, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.leases[key]
	return c, ok && c.lease != nil
}

// setLease records l at rev (nil: deleted) unless the view holds a later revision.
func (v *nodeView) setLease(key string, l *pb.NodeLease, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.leases[key]; ok && c.rev > rev {
		return
	}
	v.leases[key] = cachedLease{lease: l, rev: rev}
}
