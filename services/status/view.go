package status

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/podbus/podbus/internal/intern"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// nodeView is the nodes and their leases as this replica last saw them: from the monitor's watches
// and from its own writes. The monitor judges the nodes in it. A heartbeat that changes nothing but the heartbeat times is judged against
// it and renews the lease at the revision it holds, reading nothing, as the kubelet compares its
// status with its informer's copy of the node. Writes stay compare-and-set at the revision in the
// view, so a stale view costs a conflict and a read, never a lost or doubled write. A view that lags
// another writer (the monitor of another replica marking the node Unknown) can let a heartbeat skip a
// node write it needed; the next heartbeat, after the watch, makes it.
//
// The nodes and leases in the view are shared: nobody changes them once they are in.
type nodeView struct {
	mu     sync.Mutex
	nodes  latest[pb.Node]      // node key -> node
	leases latest[pb.NodeLease] // node key -> its lease
	// prints holds, by node key, the digest of the last heartbeat applied or judged unchanged against
	// the node at a revision (podutil.NodeStatusDigest).
	prints map[string]heartbeatSeen
}

type heartbeatSeen struct {
	digest [sha256.Size]byte
	rev    uint64
}

type cachedLease struct {
	lease *pb.NodeLease
	rev   uint64
}

func newNodeView() *nodeView {
	return &nodeView{nodes: latest[pb.Node]{}, leases: latest[pb.NodeLease]{}, prints: map[string]heartbeatSeen{}}
}

// node is the node stored under key as last seen, ok false if none is known.
func (v *nodeView) node(key string) (cachedNode, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.nodes[key]
	return cachedNode{node: e.v, rev: e.rev}, e.v != nil
}

// setNode records n at rev (nil: deleted) unless the view holds a later revision.
func (v *nodeView) setNode(key string, n *pb.Node, rev uint64) {
	intern.Node(n) // n is the caller's own until the view holds it
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nodes.set(key, n, rev)
	if n == nil {
		delete(v.prints, key)
	}
}

// printedAt says whether a heartbeat with this digest was applied, or judged to change nothing, against
// the node under key at rev.
func (v *nodeView) printedAt(key string, rev uint64, digest [sha256.Size]byte) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	p, ok := v.prints[key]
	return ok && p.rev == rev && p.digest == digest
}

// setPrint records that a heartbeat with this digest was applied, or changed nothing, at rev.
func (v *nodeView) setPrint(key string, rev uint64, digest [sha256.Size]byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.prints[key] = heartbeatSeen{digest: digest, rev: rev}
}

// lease is the lease of the node stored under key as last seen, ok false if none is known.
func (v *nodeView) lease(key string) (cachedLease, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.leases[key]
	return cachedLease{lease: e.v, rev: e.rev}, e.v != nil
}

// setLease records l at rev (nil: deleted) unless the view holds a later revision.
func (v *nodeView) setLease(key string, l *pb.NodeLease, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.leases.set(key, l, rev)
}

// nodesWhere returns the nodes for which keep holds, given each node and its lease's renew time (zero
// without one), by node key.
func (v *nodeView) nodesWhere(keep func(n *pb.Node, renewed time.Time) bool) map[string]cachedNode {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]cachedNode{}
	for key, e := range v.nodes {
		if e.v == nil {
			continue
		}
		var renewed time.Time
		if l := v.leases[key].v; l.GetRenewTime() != nil {
			renewed = l.GetRenewTime().AsTime()
		}
		if keep(e.v, renewed) {
			out[key] = cachedNode{node: e.v, rev: e.rev}
		}
	}
	return out
}

// latest keeps the last revision of each key: v nil is a deletion, kept so that an older copy arriving
// later (a watch behind the replica's own write) does not bring the key back.
type latest[T any] map[string]revision[T]

type revision[T any] struct {
	v   *T
	rev uint64
}

// set records v at rev unless a later revision is in. At the same revision the newer copy replaces the
// older, so that the view and the monitor share the watch's.
func (m latest[T]) set(key string, v *T, rev uint64) {
	if e, ok := m[key]; ok && e.rev > rev {
		return
	}
	m[key] = revision[T]{v, rev}
}
