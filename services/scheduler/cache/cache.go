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
// The cache also decides which changes may make an unschedulable pod fit (a node added, its allocatable,
// labels, taints, unschedulable or Ready changed, an alloc record lost a pod or a nomination) and names each such
// change with a trigger ("n<rev>" for the nodes bucket, "a<rev>" for alloc) that requeues use as
// their de-duplication id.
package cache

import (
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
	"github.com/podbus/podbus/services/scheduler/framework"
)

// ErrNodeNotFound is returned by Assume for a node the cache does not know (any more).
var ErrNodeNotFound = errors.New("node not in cache")

// DefaultAssumeTTL is how long an assumption lives without the binder committing it.
const DefaultAssumeTTL = 30 * time.Second

// Trigger prefixes.
const (
	triggerNodes = 'n'
	triggerAlloc = 'a'
)

// Cache is safe for concurrent use.
type Cache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	nodes   map[string]*nodeState
	assumed map[string]*assumedPod // by pod uid
	// sorted holds the NodeInfo of every existing node, by name. After Snapshot it is shared with the
	// snapshot and cloned before the next change (copy-on-write).
	sorted []*framework.NodeInfo
	shared bool
	snap   *framework.Snapshot // nil when stale

	nodesRev, allocRev uint64 // highest revision applied per bucket
	changes            uint64 // count of requeue-worthy changes
	lastTrigger        string
}

type nodeState struct {
	name        string
	node        *pb.Node // nil: no entry in the nodes bucket
	allocatable *pb.Resources
	alloc       *pb.NodeAllocation // nil: no alloc record
	// cpu/memory of the alloc record's pods with the scoring defaults applied.
	allocNZCPU, allocNZMem int64
	assumed                map[string]*assumedPod
	info                   *framework.NodeInfo // current, nil when node is nil
}

type assumedPod struct {
	uid, node    string
	req          *pb.Resources
	nzCPU, nzMem int64
	seq          uint64
	deadline     time.Time
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
		c.snap = framework.NewSnapshot(c.sorted)
		c.shared = true
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
	case triggerAlloc:
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

// UpsertNode applies a nodes-bucket entry. It returns a trigger when the change may let pending pods
// fit (a new node, or a change to what the filters look at), "" otherwise (a heartbeat).
func (c *Cache) UpsertNode(n *pb.Node, rev uint64) (trigger string) {
	name := n.GetMetadata().GetName()
	if name == "" {
		return ""
	}
	alloc := podutil.NodeAllocatable(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodesRev = max(c.nodesRev, rev)
	ns := c.state(name)
	changed := ns.node == nil || schedulingChanged(ns.node, n, ns.allocatable, alloc)
	ns.node, ns.allocatable = n, alloc
	c.refresh(ns)
	if changed {
		return c.trigger(triggerNodes, rev)
	}
	return ""
}

// RemoveNode applies a deleted nodes-bucket entry.
func (c *Cache) RemoveNode(name string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodesRev = max(c.nodesRev, rev)
	if ns := c.nodes[name]; ns != nil {
		ns.node, ns.allocatable = nil, nil
		c.refresh(ns)
	}
}

// UpsertAlloc applies an alloc-bucket entry: the committed requests replace the assumptions of the pods
// it lists. It returns a trigger when the record lost a pod (resources were freed).
func (c *Cache) UpsertAlloc(node string, a *pb.NodeAllocation, rev uint64) (trigger string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.allocRev = max(c.allocRev, rev)
	ns := c.state(node)
	shrunk := false
	for uid := range ns.alloc.GetPods() {
		if _, ok := a.GetPods()[uid]; !ok {
			shrunk = true
			break
		}
	}
	// A nomination dropped (its pod bound, deleted or nominated elsewhere) frees room for lower
	// priorities too.
	for uid := range ns.alloc.GetNominated() {
		if _, ok := a.GetNominated()[uid]; !ok {
			shrunk = true
			break
		}
	}
	ns.alloc = a
	ns.allocNZCPU, ns.allocNZMem = 0, 0
	for uid, p := range a.GetPods() {
		cpu, mem := framework.NonZeroRequests(p.GetRequests())
		ns.allocNZCPU += cpu
		ns.allocNZMem += mem
		if ap := c.assumed[uid]; ap != nil {
			if other := c.forgetLocked(ap); other != ns {
				c.refresh(other)
			}
		}
	}
	c.refresh(ns)
	if shrunk {
		return c.trigger(triggerAlloc, rev)
	}
	return ""
}

// RemoveAlloc applies a deleted alloc-bucket entry (a trigger if it listed pods).
func (c *Cache) RemoveAlloc(node string, rev uint64) (trigger string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.allocRev = max(c.allocRev, rev)
	ns := c.nodes[node]
	if ns == nil || ns.alloc == nil {
		return ""
	}
	had := len(ns.alloc.GetPods()) > 0 || len(ns.alloc.GetNominated()) > 0
	ns.alloc, ns.allocNZCPU, ns.allocNZMem = nil, 0, 0
	c.refresh(ns)
	if had {
		return c.trigger(triggerAlloc, rev)
	}
	return ""
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
	if _, committed := ns.alloc.GetPods()[uid]; committed {
		c.refresh(ns)
		return nil
	}
	ap := &assumedPod{uid: uid, node: node, req: pod.Requests, nzCPU: pod.NonZeroMilliCPU, nzMem: pod.NonZeroMemory,
		seq: seq, deadline: c.now().Add(c.ttl)}
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

// refresh rebuilds ns's NodeInfo and puts it in sorted (cloning sorted first if a snapshot shares it).
func (c *Cache) refresh(ns *nodeState) {
	c.snap = nil
	if ns.node == nil {
		if ns.info != nil {
			c.unshare()
			if i, ok := c.index(ns.name); ok {
				c.sorted = slices.Delete(c.sorted, i, i+1)
			}
			ns.info = nil
		}
		if ns.alloc == nil && len(ns.assumed) == 0 {
			delete(c.nodes, ns.name)
		}
		return
	}
	req := &pb.Resources{}
	if t := ns.alloc.GetTotal(); t != nil {
		podutil.Add(req, t)
	}
	nzCPU, nzMem := ns.allocNZCPU, ns.allocNZMem
	for _, ap := range ns.assumed {
		podutil.Add(req, ap.req)
		nzCPU += ap.nzCPU
		nzMem += ap.nzMem
	}
	info := &framework.NodeInfo{Node: ns.node, Allocatable: ns.allocatable, Requested: req, NonZeroMilliCPU: nzCPU, NonZeroMemory: nzMem,
		Pods: ns.alloc.GetPods(), Nominated: ns.alloc.GetNominated()}
	c.unshare()
	i, found := c.index(ns.name)
	if found {
		c.sorted[i] = info
	} else {
		c.sorted = slices.Insert(c.sorted, i, info)
	}
	ns.info = info
}

func (c *Cache) unshare() {
	if c.shared {
		c.sorted = slices.Clone(c.sorted)
		c.shared = false
	}
}

func (c *Cache) index(name string) (int, bool) {
	return slices.BinarySearchFunc(c.sorted, name, func(n *framework.NodeInfo, name string) int {
		return strings.Compare(n.Name(), name)
	})
}

// schedulingChanged reports whether a node update changes anything a filter looks at.
func schedulingChanged(old, cur *pb.Node, oldAlloc, curAlloc *pb.Resources) bool {
	return !proto.Equal(oldAlloc, curAlloc) ||
		!maps.Equal(old.GetMetadata().GetLabels(), cur.GetMetadata().GetLabels()) ||
		old.GetSpec().GetUnschedulable() != cur.GetSpec().GetUnschedulable() ||
		podutil.NodeIsReady(old) != podutil.NodeIsReady(cur) ||
		!slices.EqualFunc(old.GetSpec().GetTaints(), cur.GetSpec().GetTaints(), func(a, b *pb.Taint) bool {
			return a.GetKey() == b.GetKey() && a.GetValue() == b.GetValue() && a.GetEffect() == b.GetEffect()
		})
}
