// Package cache is the scheduler's view of the nodes: the `nodes` bucket (pb.Node), the `alloc` bucket
// (pb.NodeAllocation: what the binder committed per node) and the pods this scheduler assumed, folded
// into immutable framework.NodeInfos. Snapshot hands out a copy-on-write view that stays valid however
// the cache changes afterwards; it is rebuilt only when something changed.
//
// An assumed pod ("decided, not yet committed by the binder") goes through these states:
//
//	                   Assume
//	(pending pod) ───────────────▶ Assumed ──the node's alloc record lists the uid──▶ gone (now counted
//	                                 │                                                   through alloc)
//	                                 ├──Forget: back on pod.pending (conflict) or deleted──▶ gone
//	                                 └──TTL (30 s) without either──────────────────────────▶ expired
//
// Every NodeInfo lists the pods on its node (framework.PlacedPod: labels, namespace, priority, compiled
// pod (anti-)affinity), from the alloc record's entries and the assumed pods alike, so the inter-pod
// plugins count both. A PlacedPod is built once per pod (an assumed pod's is reused when the alloc
// record lists it) and shared by every later NodeInfo. The snapshot shares the node list and the
// per-image node counts copy-on-write, and the topology index until a node is added, removed or
// relabelled; the cache keeps no list of the nodes hosting pods with (anti-)affinity: a snapshot picks
// those from its node list when a cycle first asks, and the affinity registry (kept in step here)
// tells the inter-pod plugins which placed terms exist at all.
//
// The cache also decides which changes may make an unschedulable pod fit (a node added, its
// allocatable, labels, taints, unschedulable or Ready changed, an alloc record lost or gained a pod or
// lost a nomination) and names each with a trigger ("n<rev>" for the nodes bucket, "a<rev>" for an
// alloc record that lost something, "p<rev>" for one that only gained pods, see IsPodAdded) that
// requeues use as their de-duplication id, and with a framework.ClusterEvent (see Change) that the
// requeuer matches against the events the rejecting plugins registered.
package cache

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// ErrNodeNotFound is returned by Assume for a node the cache does not know (any more).
var ErrNodeNotFound = errors.New("node not in cache")

// DefaultAssumeTTL is how long an assumption lives without the binder committing it.
const DefaultAssumeTTL = 30 * time.Second

// Trigger prefixes.
const (
	triggerNodes    = 'n'
	triggerAlloc    = 'a'
	triggerPodAdded = 'p'
)

// IsPodAdded reports whether trigger names an alloc record that gained pods (and lost none).
func IsPodAdded(trigger string) bool { return len(trigger) > 1 && trigger[0] == triggerPodAdded }

// Cache is safe for concurrent use.
type Cache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	nodes   map[string]*nodeState
	assumed map[string]*assumedPod // by pod uid
	// sorted holds the NodeInfo of every existing node, by name. After Snapshot it is shared with the
	// snapshot and cloned before the next change (copy-on-write), as is imageNodes.
	sorted       framework.NodeListBuilder
	imageNodes   map[string]int // nodes per image
	imagesShared bool
	// affinity counts the placed pods' inter-pod terms; topology is shared by the snapshots until a
	// node is added, removed or relabelled (nil: start a new one).
	affinity framework.AffinityRegistry
	topology *framework.TopologyIndex
	snap     *framework.Snapshot // nil when stale

	nodesRev, allocRev uint64 // highest revision applied per bucket
	changes            uint64 // count of requeue-worthy changes
	lastTrigger        string
}

type nodeState struct {
	name        string
	node        *pb.Node // nil: no entry in the nodes bucket
	allocatable framework.Resource
	images      map[string]int64 // normalised image -> size
	// hasAlloc: the node has an alloc record (UpsertAlloc) or alloc keys were applied. The record's
	// pods are allocByUID's PlacedPods, which hold all the cache needs of them (their requests and
	// preempted_by included), and its nominations are nominated: no decoded PodAllocation is kept.
	hasAlloc bool
	// marks are the victims' preempted_by from the node's meta key, by victim uid.
	marks      map[string]string
	allocTotal framework.Resource // alloc.total
	// cpu/memory of the alloc record's pods with the scoring defaults applied.
	allocNZCPU, allocNZMem int64
	// allocPods are the alloc record's pods, by uid order; allocByUID indexes them for reuse.
	allocPods  []*framework.PlacedPod
	allocByUID map[string]*framework.PlacedPod
	// nominated are the alloc record's nominations (pods waiting for their victims' room), by uid order.
	nominated []*framework.PlacedPod
	assumed   map[string]*assumedPod
	info      *framework.NodeInfo // current, nil when node is nil
}

type assumedPod struct {
	uid, node    string
	req          framework.Resource
	nzCPU, nzMem int64
	seq          uint64
	deadline     time.Time
	placed       *framework.PlacedPod
}

// Options configure a cache.
type Options struct {
	AssumeTTL time.Duration    // default DefaultAssumeTTL
	Now       func() time.Time // default time.Now
}

// New returns an empty cache.
func New(o Options) *Cache {
	if o.AssumeTTL <= 0 {
		o.AssumeTTL = DefaultAssumeTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Cache{ttl: o.AssumeTTL, now: o.Now, nodes: map[string]*nodeState{}, assumed: map[string]*assumedPod{}}
}

// Snapshot returns an immutable view of the nodes and the change count it reflects (see Changes).
func (c *Cache) Snapshot() (*framework.Snapshot, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap == nil {
		c.snap = framework.NewSnapshotFromParts(framework.SnapshotParts{
			Nodes:      c.sorted.List(),
			ImageNodes: c.imageNodes, Topology: c.topology, Affinity: &c.affinity,
		})
		c.topology = c.snap.Topology()
		c.imagesShared = true
	}
	return c.snap, c.changes
}

// Changes returns how many requeue-worthy changes the cache has seen and the trigger of the last one.
func (c *Cache) Changes() (uint64, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changes, c.lastTrigger
}

// HasSeen reports whether the change named by trigger is already applied, so a pod requeued because of
// it is not evaluated against an older view. Unknown triggers count as seen.
func (c *Cache) HasSeen(trigger string) bool {
	bucket, rev, ok := parseTrigger(trigger)
	if !ok {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch bucket {
	case triggerNodes:
		return c.nodesRev >= rev
	case triggerAlloc, triggerPodAdded:
		return c.allocRev >= rev
	}
	return true
}

// Revisions returns the highest revision applied from the nodes and alloc buckets.
func (c *Cache) Revisions() (nodes, alloc uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodesRev, c.allocRev
}

func parseTrigger(t string) (byte, uint64, bool) {
	if len(t) < 2 {
		return 0, 0, false
	}
	rev, err := strconv.ParseUint(t[1:], 10, 64)
	return t[0], rev, err == nil
}

func (c *Cache) trigger(bucket byte, rev uint64) string {
	t := string(bucket) + strconv.FormatUint(rev, 10)
	c.changes++
	c.lastTrigger = t
	return t
}

func (c *Cache) state(name string) *nodeState {
	ns := c.nodes[name]
	if ns == nil {
		ns = &nodeState{name: name, assumed: map[string]*assumedPod{}}
		c.nodes[name] = ns
	}
	return ns
}

// Change is a change that may let pending pods fit: its trigger and what happened, as a cluster
// event (the zero Change: nothing that matters to pending pods).
type Change struct {
	Trigger string
	Event   framework.ClusterEvent
}

// UpsertNode applies a nodes-bucket entry. It returns a trigger when the change may let pending pods
// fit (a new node, or a change to what the filters look at), "" otherwise (a heartbeat).
func (c *Cache) UpsertNode(n *pb.Node, rev uint64) (trigger string) {
	return c.UpsertNodeChange(n, rev).Trigger
}

// UpsertNodeChange is UpsertNode that also says what changed: Node Add, or Node Update* (one bit per
// kind of change).
func (c *Cache) UpsertNodeChange(n *pb.Node, rev uint64) Change {
	name := n.GetMetadata().GetName()
	if name == "" {
		return Change{}
	}
	alloc := framework.ResourceOf(podutil.NodeAllocatable(n))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodesRev = max(c.nodesRev, rev)
	ns := c.state(name)
	action := framework.Add
	if ns.node != nil {
		action = nodeChanges(ns.node, n, ns.allocatable, alloc)
	}
	if ns.node == nil || !maps.Equal(ns.node.GetMetadata().GetLabels(), n.GetMetadata().GetLabels()) {
		c.topology = nil
	}
	ns.node, ns.allocatable = n, alloc
	if imgs := n.GetStatus().GetImages(); len(imgs) > 0 || ns.images != nil {
		c.setImages(ns, framework.NodeImageSizes(n))
	}
	c.refresh(ns)
	if action != 0 {
		return Change{Trigger: c.trigger(triggerNodes, rev), Event: framework.ClusterEvent{Resource: framework.Node, ActionType: action}}
	}
	return Change{}
}

// RemoveNode applies a deleted nodes-bucket entry.
func (c *Cache) RemoveNode(name string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodesRev = max(c.nodesRev, rev)
	if ns := c.nodes[name]; ns != nil {
		if ns.node != nil {
			c.topology = nil
		}
		ns.node, ns.allocatable = nil, framework.Resource{}
		c.setImages(ns, nil)
		c.refresh(ns)
	}
}

// UpsertAlloc applies an alloc-bucket entry: the committed requests replace the assumptions of the pods
// it lists. It returns a trigger when the record lost a pod (resources were freed), or else a
// pod-added trigger when it gained one.
func (c *Cache) UpsertAlloc(node string, a *pb.NodeAllocation, rev uint64) (trigger string) {
	return c.UpsertAllocChange(node, a, rev).Trigger
}

// UpsertAllocChange is UpsertAlloc that also says what changed: AssignedPod Delete (a pod or a
// nomination left), AssignedPod Add (pods came), or both.
func (c *Cache) UpsertAllocChange(node string, a *pb.NodeAllocation, rev uint64) Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.allocRev = max(c.allocRev, rev)
	ns := c.state(node)
	if c.confirmOnly(ns, a) {
		return Change{Trigger: c.trigger(triggerPodAdded, rev), Event: podEvent(framework.Add)}
	}
	shrunk := false
	for uid := range ns.allocByUID {
		if _, ok := a.GetPods()[uid]; !ok {
			shrunk = true
			break
		}
	}
	// A nomination dropped (its pod bound, deleted or nominated elsewhere) frees room for lower
	// priorities too.
	shrunk = shrunk || nominationLeft(ns.nominated, a.GetNominated())
	grown := false
	ns.hasAlloc, ns.marks, ns.allocTotal = a != nil, nil, framework.ResourceOf(a.GetTotal())
	ns.allocNZCPU, ns.allocNZMem = 0, 0
	byUID := make(map[string]*framework.PlacedPod, len(a.GetPods()))
	pods := make([]*framework.PlacedPod, 0, len(a.GetPods()))
	for uid, p := range a.GetPods() {
		cpu, mem := framework.NonZeroRequests(p.GetRequests())
		ns.allocNZCPU += cpu
		ns.allocNZMem += mem
		pp := ns.allocByUID[uid]
		if pp == nil {
			grown = true
		}
		pp = c.commitPlaced(ns, node, uid, p, pp)
		byUID[uid] = pp
		pods = append(pods, pp)
	}
	slices.SortFunc(pods, func(x, y *framework.PlacedPod) int { return strings.Compare(x.UID, y.UID) })
	ns.allocPods, ns.allocByUID = pods, byUID
	ns.nominated = nil
	for uid, p := range a.GetNominated() {
		ns.nominated = append(ns.nominated, framework.NewPlacedPod(uid, p))
	}
	slices.SortFunc(ns.nominated, func(x, y *framework.PlacedPod) int { return strings.Compare(x.UID, y.UID) })
	c.refresh(ns)
	switch {
	case shrunk && grown:
		return Change{Trigger: c.trigger(triggerAlloc, rev), Event: podEvent(framework.Delete | framework.Add)}
	case shrunk:
		return Change{Trigger: c.trigger(triggerAlloc, rev), Event: podEvent(framework.Delete)}
	case grown:
		return Change{Trigger: c.trigger(triggerPodAdded, rev), Event: podEvent(framework.Add)}
	}
	return Change{}
}

func podEvent(a framework.ActionType) framework.ClusterEvent {
	return framework.ClusterEvent{Resource: framework.AssignedPod, ActionType: a}
}

// confirmOnly applies a, the node's new alloc record, when it only adds pods this replica assumed
// there, with the requests it assumed: the binder committed this replica's decisions and nothing else
// changed. The node counts the same then, so its NodeInfo stays (a rebuild would copy a chunk of the
// node list for every committed pod); the assumed PlacedPods are confirmed in place. It reports false, having
// changed nothing, for any other record.
func (c *Cache) confirmOnly(ns *nodeState, a *pb.NodeAllocation) bool {
	if ns.info == nil || len(a.GetNominated()) > 0 || len(ns.nominated) > 0 || len(a.GetPods()) <= len(ns.allocPods) {
		return false
	}
	want := ns.allocTotal
	var added []*assumedPod
	for uid, p := range a.GetPods() {
		if pp := ns.allocByUID[uid]; pp != nil {
			if pp.PreemptedBy != p.GetPreemptedBy() {
				return false
			}
			continue
		}
		ap := ns.assumed[uid]
		if ap == nil || p.GetPreemptedBy() != "" {
			return false
		}
		if cpu, mem := framework.NonZeroRequests(p.GetRequests()); cpu != ap.nzCPU || mem != ap.nzMem {
			return false
		}
		want.Add(ap.req)
		added = append(added, ap)
	}
	// Every pod of the old record is still listed (more pods, and each old one found above).
	if len(a.GetPods()) != len(ns.allocPods)+len(added) || !sameResource(want, framework.ResourceOf(a.GetTotal())) {
		return false
	}
	pods := slices.Grow(slices.Clone(ns.allocPods), len(added))
	byUID := maps.Clone(ns.allocByUID)
	if byUID == nil {
		byUID = make(map[string]*framework.PlacedPod, len(added))
	}
	for _, ap := range added {
		ap.placed.Confirm()
		delete(c.assumed, ap.uid)
		delete(ns.assumed, ap.uid)
		ns.allocNZCPU += ap.nzCPU
		ns.allocNZMem += ap.nzMem
		pods = append(pods, ap.placed)
		byUID[ap.uid] = ap.placed
	}
	slices.SortFunc(pods, func(x, y *framework.PlacedPod) int { return strings.Compare(x.UID, y.UID) })
	ns.hasAlloc, ns.marks, ns.allocTotal, ns.allocPods, ns.allocByUID = true, nil, want, pods, byUID
	return true
}

func sameResource(x, y framework.Resource) bool {
	return x.MilliCPU == y.MilliCPU && x.Memory == y.Memory && x.EphemeralStorage == y.EphemeralStorage &&
		x.Pods == y.Pods && maps.Equal(x.Scalar, y.Scalar)
}

// RemoveAlloc applies a deleted alloc-bucket entry (a trigger if it listed pods).
func (c *Cache) RemoveAlloc(node string, rev uint64) (trigger string) {
	return c.RemoveAllocChange(node, rev).Trigger
}

// RemoveAllocChange is RemoveAlloc that also says what changed (AssignedPod Delete).
func (c *Cache) RemoveAllocChange(node string, rev uint64) Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.allocRev = max(c.allocRev, rev)
	ns := c.nodes[node]
	if ns == nil || !ns.hasAlloc {
		return Change{}
	}
	had := len(ns.allocByUID) > 0 || len(ns.nominated) > 0
	ns.hasAlloc, ns.marks, ns.allocTotal, ns.allocNZCPU, ns.allocNZMem = false, nil, framework.Resource{}, 0, 0
	ns.allocPods, ns.allocByUID, ns.nominated = nil, nil, nil
	c.refresh(ns)
	if had {
		return Change{Trigger: c.trigger(triggerAlloc, rev), Event: podEvent(framework.Delete)}
	}
	return Change{}
}

// ApplyPodAlloc applies one pod key of the alloc bucket (bus.AllocPodKey): p is the pod's allocation on
// node, nil when the key was deleted. It costs the same however many pods the node holds. It returns a
// trigger when the pod left (resources were freed), a pod-added trigger when it came.
func (c *Cache) ApplyPodAlloc(node, uid string, p *pb.PodAllocation, rev uint64) Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.allocRev = max(c.allocRev, rev)
	ns := c.state(node)
	old := ns.allocByUID[uid]
	if p == nil {
		if old == nil {
			return Change{}
		}
		ns.allocTotal.Sub(framework.ResourceOf(old.Requests))
		cpu, mem := framework.NonZeroRequests(old.Requests)
		ns.allocNZCPU -= cpu
		ns.allocNZMem -= mem
		if i, found := slices.BinarySearchFunc(ns.allocPods, uid, byUID); found {
			ns.allocPods = slices.Concat(ns.allocPods[:i:i], ns.allocPods[i+1:])
		}
		delete(ns.allocByUID, uid)
		c.refresh(ns)
		return Change{Trigger: c.trigger(triggerAlloc, rev), Event: podEvent(framework.Delete)}
	}
	ns.keyed()
	if by := ns.marks[uid]; by != p.GetPreemptedBy() {
		p = proto.Clone(p).(*pb.PodAllocation)
		p.PreemptedBy = by
	}
	req := framework.ResourceOf(p.GetRequests())
	cpu, mem := framework.NonZeroRequests(p.GetRequests())
	if old != nil {
		// Rewritten in place (a tentative reservation confirmed): what it counts may change, it stays.
		oreq := framework.ResourceOf(old.Requests)
		ns.allocTotal.Sub(oreq)
		ocpu, omem := framework.NonZeroRequests(old.Requests)
		ns.allocNZCPU += cpu - ocpu
		ns.allocNZMem += mem - omem
		ns.allocTotal.Add(req)
		pp := old.Committed(p)
		if !sameResource(oreq, req) {
			// The PlacedPod holds the only copy of what the pod counts.
			pp = pp.WithRequests(p.GetRequests())
		}
		c.setPlaced(ns, pp)
		c.refresh(ns)
		return Change{}
	}
	ns.allocTotal.Add(req)
	ns.allocNZCPU += cpu
	ns.allocNZMem += mem
	ap := c.assumed[uid]
	if ap != nil && ap.node == node && ns.info != nil && p.GetPreemptedBy() == "" &&
		cpu == ap.nzCPU && mem == ap.nzMem && sameResource(req, ap.req) {
		// This replica's own decision committed: the node counts the same, so its NodeInfo stays (a
		// rebuild would copy a chunk of the node list for every committed pod).
		ap.placed.Confirm()
		delete(c.assumed, uid)
		delete(ns.assumed, uid)
		c.setPlaced(ns, ap.placed)
		return Change{Trigger: c.trigger(triggerPodAdded, rev), Event: podEvent(framework.Add)}
	}
	c.setPlaced(ns, c.commitPlaced(ns, node, uid, p, nil))
	c.refresh(ns)
	return Change{Trigger: c.trigger(triggerPodAdded, rev), Event: podEvent(framework.Add)}
}

// commitPlaced is the placed pod uid becomes on node once committed: pp (already placed) or this
// replica's assumption of it on the same node, updated, else a new one. An assumption of the pod is
// forgotten, and the node it was on refreshed.
func (c *Cache) commitPlaced(ns *nodeState, node, uid string, p *pb.PodAllocation, pp *framework.PlacedPod) *framework.PlacedPod {
	if ap := c.assumed[uid]; ap != nil {
		if pp == nil && ap.node == node {
			pp = ap.placed
		}
		if other := c.forgetLocked(ap); other != ns {
			c.refresh(other)
		}
	}
	if pp == nil {
		return framework.NewPlacedPod(uid, p)
	}
	return pp.Committed(p)
}

// ApplyNodeMeta applies the meta key of node in the alloc bucket (bus.AllocMetaKey): its nominated pods
// and, under pods, the victims' preempted_by (nil: the key was deleted). It returns a trigger when a
// nomination left, which frees room for lower priorities.
func (c *Cache) ApplyNodeMeta(node string, meta *pb.NodeAllocation, rev uint64) Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.allocRev = max(c.allocRev, rev)
	ns := c.state(node)
	ns.keyed()
	marks := map[string]string{}
	for uid, m := range meta.GetPods() {
		if by := m.GetPreemptedBy(); by != "" {
			marks[uid] = by
		}
	}
	for uid := range joinKeys(ns.marks, marks) {
		pp := ns.allocByUID[uid]
		if pp == nil || pp.PreemptedBy == marks[uid] {
			continue
		}
		c.setPlaced(ns, pp.Committed(&pb.PodAllocation{PreemptedBy: marks[uid]}))
	}
	ns.marks = marks
	shrunk := nominationLeft(ns.nominated, meta.GetNominated())
	ns.nominated = nil
	for uid, p := range meta.GetNominated() {
		ns.nominated = append(ns.nominated, framework.NewPlacedPod(uid, p))
	}
	slices.SortFunc(ns.nominated, func(x, y *framework.PlacedPod) int { return strings.Compare(x.UID, y.UID) })
	c.refresh(ns)
	if shrunk {
		return Change{Trigger: c.trigger(triggerAlloc, rev), Event: podEvent(framework.Delete)}
	}
	return Change{}
}

// keyed records that alloc keys of the node were applied.
func (ns *nodeState) keyed() {
	ns.hasAlloc = true
	if ns.allocByUID == nil {
		ns.allocByUID = map[string]*framework.PlacedPod{}
	}
}

// nominationLeft reports whether a nomination of was is not in now.
func nominationLeft(was []*framework.PlacedPod, now map[string]*pb.PodAllocation) bool {
	for _, pp := range was {
		if _, ok := now[pp.UID]; !ok {
			return true
		}
	}
	return false
}

// setPlaced puts pp in the node's committed pods, replacing the one of the same uid. The list is
// copied, not changed: NodeInfos share it.
func (c *Cache) setPlaced(ns *nodeState, pp *framework.PlacedPod) {
	i, found := slices.BinarySearchFunc(ns.allocPods, pp.UID, byUID)
	pods := make([]*framework.PlacedPod, 0, len(ns.allocPods)+1)
	pods = append(pods, ns.allocPods[:i]...)
	pods = append(pods, pp)
	if found {
		i++
	}
	ns.allocPods = append(pods, ns.allocPods[i:]...)
	ns.allocByUID[pp.UID] = pp
}

func byUID(p *framework.PlacedPod, uid string) int { return strings.Compare(p.UID, uid) }

func joinKeys(a, b map[string]string) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// Assume counts pod on node until the binder's alloc record shows it, it is forgotten, or the TTL passes.
// seq identifies the decision (the pending message's stream sequence). A pod assumed elsewhere moves.
func (c *Cache) Assume(pod *framework.PodInfo, node string, seq uint64) error {
	uid := pod.UID()
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := c.nodes[node]
	if ns == nil || ns.node == nil {
		return fmt.Errorf("assume %s on %s: %w", uid, node, ErrNodeNotFound)
	}
	if old := c.assumed[uid]; old != nil {
		if other := c.forgetLocked(old); other != ns {
			c.refresh(other)
		}
	}
	if _, committed := ns.allocByUID[uid]; committed {
		c.refresh(ns)
		return nil
	}
	ap := &assumedPod{uid: uid, node: node, req: pod.Request, nzCPU: pod.NonZeroMilliCPU, nzMem: pod.NonZeroMemory,
		seq: seq, deadline: c.now().Add(c.ttl), placed: pod.Placed()}
	c.assumed[uid] = ap
	ns.assumed[uid] = ap
	c.refresh(ns)
	return nil
}

// Assumed returns where uid is assumed and by which decision.
func (c *Cache) Assumed(uid string) (node string, seq uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ap := c.assumed[uid]
	if ap == nil {
		return "", 0, false
	}
	return ap.node, ap.seq, true
}

// Forget drops uid's assumption; it reports whether there was one.
func (c *Cache) Forget(uid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ap := c.assumed[uid]
	if ap == nil {
		return false
	}
	c.refresh(c.forgetLocked(ap))
	return true
}

// Cleanup drops assumptions past their TTL and returns how many.
func (c *Cache) Cleanup() int {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ap := range c.assumed {
		if now.After(ap.deadline) {
			c.refresh(c.forgetLocked(ap))
			n++
		}
	}
	return n
}

// NumAssumed is the number of live assumptions.
func (c *Cache) NumAssumed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.assumed)
}

// forgetLocked removes ap and returns its node's state, which the caller must refresh.
func (c *Cache) forgetLocked(ap *assumedPod) *nodeState {
	delete(c.assumed, ap.uid)
	ns := c.nodes[ap.node]
	delete(ns.assumed, ap.uid)
	return ns
}

// refresh rebuilds ns's NodeInfo and puts it in the sorted lists (cloning a list first if a snapshot
// shares it).
func (c *Cache) refresh(ns *nodeState) {
	c.snap = nil
	if ns.node == nil {
		if ns.info != nil {
			c.sorted.Set(ns.name, nil)
			c.affinity.Update(ns.info, nil)
			ns.info = nil
		}
		if !ns.hasAlloc && len(ns.assumed) == 0 {
			delete(c.nodes, ns.name)
		}
		return
	}
	req := ns.allocTotal
	nzCPU, nzMem := ns.allocNZCPU, ns.allocNZMem
	pods := ns.allocPods
	if len(ns.assumed) > 0 {
		assumed := make([]*assumedPod, 0, len(ns.assumed))
		for _, ap := range ns.assumed {
			req.Add(ap.req)
			nzCPU += ap.nzCPU
			nzMem += ap.nzMem
			assumed = append(assumed, ap)
		}
		// Decision order, so the pod list is a function of the cache's contents.
		slices.SortFunc(assumed, func(x, y *assumedPod) int { return cmp.Compare(x.seq, y.seq) })
		pods = make([]*framework.PlacedPod, len(ns.allocPods), len(ns.allocPods)+len(assumed))
		copy(pods, ns.allocPods)
		for _, ap := range assumed {
			pods = append(pods, ap.placed)
		}
	}
	info := &framework.NodeInfo{Allocatable: ns.allocatable, Requested: req, NonZeroMilliCPU: nzCPU, NonZeroMemory: nzMem,
		ImageSizes: ns.images, Nominated: ns.nominated}
	info.SetNode(ns.node)
	info.SetPods(pods)
	c.sorted.Set(ns.name, info)
	c.affinity.Update(ns.info, info)
	ns.info = info
}

// setImages replaces ns's images and keeps the per-image node counts.
func (c *Cache) setImages(ns *nodeState, imgs map[string]int64) {
	if maps.Equal(ns.images, imgs) {
		return
	}
	if c.imagesShared || c.imageNodes == nil {
		c.imageNodes = maps.Clone(c.imageNodes)
		if c.imageNodes == nil {
			c.imageNodes = map[string]int{}
		}
		c.imagesShared = false
	}
	for img := range ns.images {
		if c.imageNodes[img]--; c.imageNodes[img] <= 0 {
			delete(c.imageNodes, img)
		}
	}
	for img := range imgs {
		c.imageNodes[img]++
	}
	ns.images = imgs
}

// nodeChanges returns the changes of a node update that a filter looks at (0: none).
func nodeChanges(old, cur *pb.Node, oldAlloc, curAlloc framework.Resource) framework.ActionType {
	var a framework.ActionType
	if oldAlloc.MilliCPU != curAlloc.MilliCPU || oldAlloc.Memory != curAlloc.Memory ||
		oldAlloc.EphemeralStorage != curAlloc.EphemeralStorage || oldAlloc.Pods != curAlloc.Pods ||
		!maps.Equal(oldAlloc.Scalar, curAlloc.Scalar) {
		a |= framework.UpdateNodeAllocatable
	}
	if !maps.Equal(old.GetMetadata().GetLabels(), cur.GetMetadata().GetLabels()) {
		a |= framework.UpdateNodeLabel
	}
	if old.GetSpec().GetUnschedulable() != cur.GetSpec().GetUnschedulable() ||
		!slices.EqualFunc(old.GetSpec().GetTaints(), cur.GetSpec().GetTaints(), func(a, b *pb.Taint) bool {
			return a.GetKey() == b.GetKey() && a.GetValue() == b.GetValue() && a.GetEffect() == b.GetEffect()
		}) {
		a |= framework.UpdateNodeTaint
	}
	if podutil.NodeIsReady(old) != podutil.NodeIsReady(cur) {
		a |= framework.UpdateNodeCondition
	}
	return a
}
