package framework

import (
	"sort"
	"strings"

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
	// Affinity is the pod's compiled pod (anti-)affinity, nil when it has none.
	Affinity *PodAffinityTerms
}

// NewPodInfo computes the pod's requests and compiles its pod affinity terms.
func NewPodInfo(p *pb.Pod) *PodInfo {
	req := podutil.PodRequests(p)
	cpu, mem := NonZeroRequests(req)
	a := p.GetSpec().GetAffinity()
	return &PodInfo{Pod: p, Requests: req, NonZeroMilliCPU: cpu, NonZeroMemory: mem,
		Affinity: CompilePodAffinity(p.GetMetadata().GetNamespace(), a.GetPodAffinity(), a.GetPodAntiAffinity())}
}

// Placed returns the pod as it will count on its node once placed (the cache's assumed pods).
func (p *PodInfo) Placed() *PlacedPod {
	md := p.Pod.GetMetadata()
	pp := &PlacedPod{UID: md.GetUid(), Namespace: md.GetNamespace(), Name: md.GetName(), Labels: md.GetLabels(),
		Priority: p.Pod.GetSpec().GetPriority(), SchedulerName: p.Pod.GetSpec().GetSchedulerName(),
		Requests: p.Requests, Affinity: p.Affinity}
	if ts := md.GetCreationTimestamp(); ts != nil {
		pp.CreationTimestamp = ts.AsTime()
	}
	return pp
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
	// Pods on the node: committed (alloc record) and assumed. PodsWithAffinity are those with any pod
	// (anti-)affinity term, PodsWithRequiredAntiAffinity those with a required anti-affinity term.
	// The slices are shared between snapshots and must not be modified.
	Pods, PodsWithAffinity, PodsWithRequiredAntiAffinity []*PlacedPod
	// ImageSizes maps the node's images (normalised names, see NormalizedImageName) to their sizes.
	ImageSizes map[string]int64
}

// SetPods sets Pods and derives the affinity lists from it.
func (n *NodeInfo) SetPods(pods []*PlacedPod) {
	n.Pods, n.PodsWithAffinity, n.PodsWithRequiredAntiAffinity = pods, nil, nil
	for _, p := range pods {
		if p.HasAffinity() {
			n.PodsWithAffinity = append(n.PodsWithAffinity, p)
		}
		if p.HasRequiredAntiAffinity() {
			n.PodsWithRequiredAntiAffinity = append(n.PodsWithRequiredAntiAffinity, p)
		}
	}
}

// NormalizedImageName adds ":latest" to an image name without a tag, as kube-scheduler's ImageLocality.
func NormalizedImageName(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		name += ":latest"
	}
	return name
}

// NodeImageSizes maps the images in n's status to their sizes (nil when there are none).
func NodeImageSizes(n *pb.Node) map[string]int64 {
	imgs := n.GetStatus().GetImages()
	if len(imgs) == 0 {
		return nil
	}
	out := make(map[string]int64, len(imgs))
	for _, img := range imgs {
		for _, name := range img.GetNames() {
			out[NormalizedImageName(name)] = img.GetSizeBytes()
		}
	}
	return out
}

// Name of the node.
func (n *NodeInfo) Name() string { return n.Node.GetMetadata().GetName() }

// NewNodeInfo builds a NodeInfo for a node with nothing requested yet (tests, and the cache's base).
func NewNodeInfo(n *pb.Node) *NodeInfo {
	return &NodeInfo{Node: n, Allocatable: podutil.NodeAllocatable(n), Requested: &pb.Resources{}, ImageSizes: NodeImageSizes(n)}
}

// WithPods returns a copy of n with pods placed on it (requests added) — tests and tools.
func (n *NodeInfo) WithPods(pods ...*PlacedPod) *NodeInfo {
	c := *n
	req := &pb.Resources{}
	podutil.Add(req, n.Requested)
	for _, p := range pods {
		podutil.Add(req, p.Requests)
		cpu, mem := NonZeroRequests(p.Requests)
		c.NonZeroMilliCPU += cpu
		c.NonZeroMemory += mem
	}
	c.Requested = req
	c.SetPods(append(append([]*PlacedPod(nil), n.Pods...), pods...))
	return &c
}

// Snapshot is an immutable, name-ordered view of every node, taken once per scheduling cycle.
type Snapshot struct {
	nodes []*NodeInfo
	// Nodes hosting pods with pod (anti-)affinity / required anti-affinity, so the inter-pod plugins
	// visit only those (kube-scheduler's HavePodsWithAffinityList and HavePodsWithRequiredAntiAffinityList).
	withAffinity, withRequiredAntiAffinity []*NodeInfo
	// imageNodes counts the nodes that hold each image (ImageLocality's spread).
	imageNodes map[string]int
}

// SnapshotParts are what the cache maintains incrementally for a snapshot; all must not be modified
// afterwards. Nodes must be sorted by name.
type SnapshotParts struct {
	Nodes, WithAffinity, WithRequiredAntiAffinity []*NodeInfo
	ImageNodes                                    map[string]int
}

// NewSnapshotFromParts wraps parts without copying.
func NewSnapshotFromParts(p SnapshotParts) *Snapshot {
	return &Snapshot{nodes: p.Nodes, withAffinity: p.WithAffinity, withRequiredAntiAffinity: p.WithRequiredAntiAffinity, imageNodes: p.ImageNodes}
}

// NewSnapshot wraps nodes, which must be sorted by name and must not be modified afterwards, and derives
// the affinity lists and image counts from them (O(nodes)).
func NewSnapshot(nodes []*NodeInfo) *Snapshot {
	s := &Snapshot{nodes: nodes}
	for _, n := range nodes {
		if len(n.PodsWithAffinity) > 0 {
			s.withAffinity = append(s.withAffinity, n)
		}
		if len(n.PodsWithRequiredAntiAffinity) > 0 {
			s.withRequiredAntiAffinity = append(s.withRequiredAntiAffinity, n)
		}
		for img := range n.ImageSizes {
			if s.imageNodes == nil {
				s.imageNodes = map[string]int{}
			}
			s.imageNodes[img]++
		}
	}
	return s
}

// SnapshotOf sorts a copy of nodes by name (tests and tools).
func SnapshotOf(nodes ...*NodeInfo) *Snapshot {
	s := append([]*NodeInfo(nil), nodes...)
	sort.Slice(s, func(i, j int) bool { return s[i].Name() < s[j].Name() })
	return NewSnapshot(s)
}

// HavePodsWithAffinity returns the nodes hosting a pod with pod (anti-)affinity, in name order.
func (s *Snapshot) HavePodsWithAffinity() []*NodeInfo { return s.withAffinity }

// HavePodsWithRequiredAntiAffinity returns the nodes hosting a pod with required anti-affinity.
func (s *Snapshot) HavePodsWithRequiredAntiAffinity() []*NodeInfo { return s.withRequiredAntiAffinity }

// ImageNumNodes returns how many nodes hold image (a normalised name).
func (s *Snapshot) ImageNumNodes(image string) int { return s.imageNodes[image] }

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
