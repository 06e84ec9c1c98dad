package framework

import (
	"sort"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Kubernetes' defaults for containers without requests, used only for scoring (a pod asking for
// nothing still uses something, so spreading should count it).
const (
	DefaultMilliCPURequest int64 = 100               // 0.1 core
	DefaultMemoryRequest   int64 = 200 * 1024 * 1024 // 200 MiB
)

// NonZeroRequests returns cpu and memory with the scoring defaults applied where the request is zero.
func NonZeroRequests(r *pb.Resources) (milliCPU, memory int64) {
	milliCPU, memory = r.GetMilliCpu(), r.GetMemory()
	if milliCPU == 0 {
		milliCPU = DefaultMilliCPURequest
	}
	if memory == 0 {
		memory = DefaultMemoryRequest
	}
	return milliCPU, memory
}

// PodInfo is the pod being scheduled with what every plugin needs, computed once per cycle.
type PodInfo struct {
	Pod      *pb.Pod
	Requests *pb.Resources // podutil.PodRequests: what the binder will reserve
	// Requests with the scoring defaults applied.
	NonZeroMilliCPU, NonZeroMemory int64
}

// NewPodInfo computes the pod's requests.
func NewPodInfo(p *pb.Pod) *PodInfo {
	req := podutil.PodRequests(p)
	cpu, mem := NonZeroRequests(req)
	return &PodInfo{Pod: p, Requests: req, NonZeroMilliCPU: cpu, NonZeroMemory: mem}
}

// UID of the pod.
func (p *PodInfo) UID() string { return p.Pod.GetMetadata().GetUid() }

// NodeInfo is one node as the scheduler sees it. It is immutable: the cache replaces it on change.
type NodeInfo struct {
	Node        *pb.Node
	Allocatable *pb.Resources
	// Requested is what the binder committed (alloc record) plus what this scheduler assumed.
	Requested *pb.Resources
	// NonZeroRequested is Requested's cpu and memory with the scoring defaults applied per pod.
	NonZeroMilliCPU, NonZeroMemory int64
	// Ready: the node's Ready condition is True. Computed once when the NodeInfo is built, since the
	// filter runs for hundreds of nodes per pod: build NodeInfos with NewNodeInfo (or set it).
	Ready bool
}

// Name of the node.
func (n *NodeInfo) Name() string { return n.Node.GetMetadata().GetName() }

// NewNodeInfo builds a NodeInfo for a node with nothing requested yet (tests, and the cache's base).
func NewNodeInfo(n *pb.Node) *NodeInfo {
	return &NodeInfo{Node: n, Allocatable: podutil.NodeAllocatable(n), Requested: &pb.Resources{}, Ready: podutil.NodeIsReady(n)}
}

// Snapshot is an immutable, name-ordered view of every node, taken once per scheduling cycle.
type Snapshot struct {
	nodes []*NodeInfo
}

// NewSnapshot wraps nodes, which must be sorted by name and must not be modified afterwards.
func NewSnapshot(nodes []*NodeInfo) *Snapshot { return &Snapshot{nodes: nodes} }

// SnapshotOf sorts a copy of nodes by name (tests and tools).
func SnapshotOf(nodes ...*NodeInfo) *Snapshot {
	s := append([]*NodeInfo(nil), nodes...)
	sort.Slice(s, func(i, j int) bool { return s[i].Name() < s[j].Name() })
	return NewSnapshot(s)
}

// Nodes returns the nodes in name order; callers must not modify the slice.
func (s *Snapshot) Nodes() []*NodeInfo { return s.nodes }

// NumNodes is the number of nodes.
func (s *Snapshot) NumNodes() int { return len(s.nodes) }

// Get returns the node called name, or nil.
func (s *Snapshot) Get(name string) *NodeInfo {
	i := sort.Search(len(s.nodes), func(i int) bool { return s.nodes[i].Name() >= name })
	if i < len(s.nodes) && s.nodes[i].Name() == name {
		return s.nodes[i]
	}
	return nil
}
