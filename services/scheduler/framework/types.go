package framework

import (
	"sort"

	"google.golang.org/protobuf/proto"

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
	// Pods are the pods the node's alloc record commits to it, by uid (shared with the cache: read-only).
	// Pods this scheduler only assumed are counted in Requested but not listed.
	Pods map[string]*pb.PodAllocation
	// Nominated are pods that preempted others here and wait for the room, by uid (read-only).
	Nominated map[string]*pb.PodAllocation
}

// Name of the node.
func (n *NodeInfo) Name() string { return n.Node.GetMetadata().GetName() }

// NewNodeInfo builds a NodeInfo for a node with nothing requested yet (tests, and the cache's base).
func NewNodeInfo(n *pb.Node) *NodeInfo {
	return &NodeInfo{Node: n, Allocatable: podutil.NodeAllocatable(n), Requested: &pb.Resources{}}
}

// WithoutPods returns a copy of n from which the listed pods (uids in n.Pods) are removed: their
// requests no longer count and they are no longer listed. Preemption filters the pod against it.
func (n *NodeInfo) WithoutPods(uids ...string) *NodeInfo {
	c := *n
	c.Requested = proto.Clone(n.Requested).(*pb.Resources)
	c.Pods = make(map[string]*pb.PodAllocation, len(n.Pods))
	for uid, p := range n.Pods {
		c.Pods[uid] = p
	}
	for _, uid := range uids {
		p, ok := c.Pods[uid]
		if !ok {
			continue
		}
		delete(c.Pods, uid)
		podutil.Sub(c.Requested, p.GetRequests())
		cpu, mem := NonZeroRequests(p.GetRequests())
		c.NonZeroMilliCPU -= cpu
		c.NonZeroMemory -= mem
	}
	return &c
}

// WithPod returns a copy of n with p (uid) added, as if the binder had committed it.
func (n *NodeInfo) WithPod(uid string, p *pb.PodAllocation) *NodeInfo {
	c := *n
	c.Requested = proto.Clone(n.Requested).(*pb.Resources)
	c.Pods = make(map[string]*pb.PodAllocation, len(n.Pods)+1)
	for u, q := range n.Pods {
		c.Pods[u] = q
	}
	c.Pods[uid] = p
	podutil.Add(c.Requested, p.GetRequests())
	cpu, mem := NonZeroRequests(p.GetRequests())
	c.NonZeroMilliCPU += cpu
	c.NonZeroMemory += mem
	return &c
}

// WithNominated returns n with the requests of the pods nominated to it that pod must leave room for:
// those of equal or higher priority, other than pod itself (kube-scheduler's
// RunFilterPluginsWithNominatedPods). n itself when there are none.
func (n *NodeInfo) WithNominated(pod *PodInfo) *NodeInfo {
	if len(n.Nominated) == 0 {
		return n
	}
	prio, uid := PodPriority(pod.Pod), pod.UID()
	out := n
	for u, p := range n.Nominated {
		if u == uid || p.GetPriority() < prio {
			continue
		}
		if _, placed := n.Pods[u]; placed {
			continue
		}
		if out == n {
			c := *n
			c.Requested = proto.Clone(n.Requested).(*pb.Resources)
			out = &c
		}
		podutil.Add(out.Requested, p.GetRequests())
		cpu, mem := NonZeroRequests(p.GetRequests())
		out.NonZeroMilliCPU += cpu
		out.NonZeroMemory += mem
	}
	return out
}

// PodPriority is spec.priority (0 when unset, as Kubernetes' corev1helpers.PodPriority).
func PodPriority(p *pb.Pod) int32 { return p.GetSpec().GetPriority() }

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
