package framework

import (
	"iter"
	"slices"
	"sort"
	"strings"
	"sync"
	"unique"

	"github.com/podbus/podbus/internal/intern"
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
	Request  Resource      // Requests by value, for the filter loop
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
	return &PodInfo{Pod: p, Requests: req, Request: ResourceOf(req), NonZeroMilliCPU: cpu, NonZeroMemory: mem,
		Affinity: CompilePodAffinity(p.GetMetadata().GetNamespace(), a.GetPodAffinity(), a.GetPodAntiAffinity())}
}

// Placed returns the pod as it will count on its node once placed (the cache's assumed pods).
func (p *PodInfo) Placed() *PlacedPod {
	md := p.Pod.GetMetadata()
	// The uid and the name in one allocation, the rest shared with the pod's alloc entry and its
	// ReplicaSet's other pods: the cache keeps it while the pod runs.
	ids := md.GetUid() + md.GetName()
	pp := &PlacedPod{UID: ids[:len(md.GetUid())], Namespace: intern.String(md.GetNamespace()), Name: ids[len(md.GetUid()):],
		Labels:    intern.Labels(md.GetLabels()),
		LabelsKey: LabelsKey(md.GetNamespace(), md.GetLabels()),
		Priority:  p.Pod.GetSpec().GetPriority(), SchedulerName: intern.String(p.Pod.GetSpec().GetSchedulerName()),
		Requests: intern.Resources(p.Requests), Affinity: p.Affinity, assumption: &assumption{}}
	if ts := md.GetCreationTimestamp(); ts != nil {
		pp.CreationTimestamp = ts.AsTime()
	}
	return pp
}

// UID of the pod.
func (p *PodInfo) UID() string { return p.Pod.GetMetadata().GetUid() }

// NodeInfo is one node as the scheduler sees it. It is immutable: the cache replaces it on change.
// The fields the filters and scores read for every visited node come first and are held by value
// (see Resource): a cycle visits hundreds of nodes, and each pointer it follows is a cache miss.
type NodeInfo struct {
	// Allocatable is the node's allocatable; Requested what the binder committed (alloc record) plus
	// what this scheduler assumed.
	Allocatable, Requested Resource
	// NonZeroRequested is Requested's cpu and memory with the scoring defaults applied per pod.
	NonZeroMilliCPU, NonZeroMemory int64
	// Ready: the node's Ready condition is True. Unschedulable: spec.unschedulable (cordoned).
	Ready, Unschedulable bool
	// Taints and Labels are the node's (shared with Node, read-only).
	Taints []*pb.Taint
	Labels map[string]string
	name   string
	// Nominated are pods that preempted others here and wait for the room (the alloc record's
	// nominations, by uid), read-only. They are not in Pods; WithNominated counts their requests.
	Nominated []*PlacedPod

	Node *pb.Node
	// Pods on the node: committed (alloc record) and assumed. PodsWithAffinity are those with any pod
	// (anti-)affinity term, PodsWithRequiredAntiAffinity those with a required anti-affinity term.
	// The slices are shared between snapshots and must not be modified.
	Pods, PodsWithAffinity, PodsWithRequiredAntiAffinity []*PlacedPod
	// LabelSets groups Pods by LabelsKey, and RequiredAntiAffinityTerms groups the required
	// anti-affinity terms of PodsWithRequiredAntiAffinity by Key: the inter-pod plugins visit every
	// placed pod each cycle, and replicas of a workload on one node then cost one step.
	LabelSets                 []PodGroup
	RequiredAntiAffinityTerms []TermGroup
	// ImageSizes maps the node's images (normalised names, see NormalizedImageName) to their sizes.
	ImageSizes map[string]int64
}

// SetNode sets Node and the fields derived from it (name, labels, taints, unschedulable, Ready).
// Every NodeInfo is built through it (or NewNodeInfo).
func (n *NodeInfo) SetNode(node *pb.Node) {
	n.Node = node
	n.name = node.GetMetadata().GetName()
	n.Labels = node.GetMetadata().GetLabels()
	n.Taints = node.GetSpec().GetTaints()
	n.Unschedulable = node.GetSpec().GetUnschedulable()
	n.Ready = podutil.NodeIsReady(node)
}

// PodGroup is Count pods of a node with the same namespace and labels (Example is one of them). Key is
// Example.LabelsKey, kept here so that the filters that visit every node read it from the node's own
// list instead of following Example (a cache miss per node).
type PodGroup struct {
	Key     unique.Handle[string]
	Example *PlacedPod
	Count   int
}

// TermGroup is a required anti-affinity term held by Count pods of a node; Key is Term.Key (see
// PodGroup).
type TermGroup struct {
	Key   unique.Handle[string]
	Term  *AffinityTerm
	Count int
}

// SetPods sets Pods and derives the affinity lists and groups from it.
func (n *NodeInfo) SetPods(pods []*PlacedPod) {
	n.Pods, n.PodsWithAffinity, n.PodsWithRequiredAntiAffinity = pods, nil, nil
	n.LabelSets, n.RequiredAntiAffinityTerms = nil, nil
	var zero unique.Handle[string]
	for _, p := range pods {
		if p.HasAffinity() {
			n.PodsWithAffinity = append(n.PodsWithAffinity, p)
		}
		if p.HasRequiredAntiAffinity() {
			n.PodsWithRequiredAntiAffinity = append(n.PodsWithRequiredAntiAffinity, p)
			for i := range p.Affinity.RequiredAntiAffinity {
				t := &p.Affinity.RequiredAntiAffinity[i]
				j := slices.IndexFunc(n.RequiredAntiAffinityTerms, func(g TermGroup) bool { return t.Key != zero && g.Key == t.Key })
				if j < 0 {
					n.RequiredAntiAffinityTerms = append(n.RequiredAntiAffinityTerms, TermGroup{Key: t.Key, Term: t, Count: 1})
				} else {
					n.RequiredAntiAffinityTerms[j].Count++
				}
			}
		}
		j := slices.IndexFunc(n.LabelSets, func(g PodGroup) bool { return p.LabelsKey != zero && g.Key == p.LabelsKey })
		if j < 0 {
			n.LabelSets = append(n.LabelSets, PodGroup{Key: p.LabelsKey, Example: p, Count: 1})
		} else {
			n.LabelSets[j].Count++
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
func (n *NodeInfo) Name() string { return n.name }

// NewNodeInfo builds a NodeInfo for a node with nothing requested yet (tests, and the cache's base).
func NewNodeInfo(n *pb.Node) *NodeInfo {
	ni := &NodeInfo{Allocatable: ResourceOf(podutil.NodeAllocatable(n)), ImageSizes: NodeImageSizes(n)}
	ni.SetNode(n)
	return ni
}

// WithPods returns a copy of n with pods placed on it (requests added) — tests and tools.
func (n *NodeInfo) WithPods(pods ...*PlacedPod) *NodeInfo {
	c := *n
	for _, p := range pods {
		c.Requested.Add(ResourceOf(p.Requests))
		cpu, mem := NonZeroRequests(p.Requests)
		c.NonZeroMilliCPU += cpu
		c.NonZeroMemory += mem
	}
	c.SetPods(append(append([]*PlacedPod(nil), n.Pods...), pods...))
	return &c
}

// WithoutPods returns a copy of n without the pods whose uids are listed: their requests no longer
// count and they leave Pods and the affinity lists. Preemption filters the pod against such views.
func (n *NodeInfo) WithoutPods(uids ...string) *NodeInfo {
	if len(uids) == 0 {
		return n
	}
	drop := make(map[string]struct{}, len(uids))
	for _, u := range uids {
		drop[u] = struct{}{}
	}
	c := *n
	pods := make([]*PlacedPod, 0, len(n.Pods))
	for _, p := range n.Pods {
		if _, ok := drop[p.UID]; !ok {
			pods = append(pods, p)
			continue
		}
		c.Requested.Sub(ResourceOf(p.Requests))
		cpu, mem := NonZeroRequests(p.Requests)
		c.NonZeroMilliCPU -= cpu
		c.NonZeroMemory -= mem
	}
	c.SetPods(pods)
	return &c
}

// WithPod is WithPods with one pod (preemption's reprieve puts a candidate victim back).
func (n *NodeInfo) WithPod(p *PlacedPod) *NodeInfo { return n.WithPods(p) }

// WithNominated returns n with the requests of the pods nominated to it that pod must leave room for:
// those of equal or higher priority, other than pod itself (kube-scheduler's
// RunFilterPluginsWithNominatedPods, for resources only: the inter-pod plugins do not see nominated
// pods). n itself when there are none.
func (n *NodeInfo) WithNominated(pod *PodInfo) *NodeInfo {
	if len(n.Nominated) == 0 {
		return n
	}
	prio, uid := PodPriority(pod.Pod), pod.UID()
	out := n
	for _, p := range n.Nominated {
		if p.UID == uid || p.Priority < prio || n.hasPod(p.UID) {
			continue // itself, yields to pod, or already counted (this replica assumed it here)
		}
		if out == n {
			c := *n
			out = &c
		}
		out.Requested.Add(ResourceOf(p.Requests))
		cpu, mem := NonZeroRequests(p.Requests)
		out.NonZeroMilliCPU += cpu
		out.NonZeroMemory += mem
	}
	return out
}

func (n *NodeInfo) hasPod(uid string) bool {
	for _, p := range n.Pods {
		if p.UID == uid {
			return true
		}
	}
	return false
}

// PodPriority is spec.priority (0 when unset, as Kubernetes' corev1helpers.PodPriority).
func PodPriority(p *pb.Pod) int32 { return p.GetSpec().GetPriority() }

// Snapshot is an immutable, name-ordered view of every node, taken once per scheduling cycle.
type Snapshot struct {
	nodes NodeList
	// imageNodes counts the nodes that hold each image (ImageLocality's spread).
	imageNodes map[string]int
	// topology: the nodes of each topology domain; antiTerms and scoringPods: see AffinityRegistry.
	topology    *TopologyIndex
	antiTerms   []*AffinityTerm
	scoringPods bool
	// The nodes as a slice, and those hosting pods with pod (anti-)affinity / required anti-affinity
	// (kube-scheduler's HavePodsWithAffinityList and HavePodsWithRequiredAntiAffinityList), built on
	// first use: most cycles never need them. The last two are picked from the nodes then rather than
	// kept by the cache, which would have to copy a chunk of each on every change.
	flat, flatAffinity, flatAnti lazySlice
}

type lazySlice struct {
	once sync.Once
	s    []*NodeInfo
}

func (l *lazySlice) get(build func() []*NodeInfo) []*NodeInfo {
	l.once.Do(func() { l.s = build() })
	return l.s
}

// SnapshotParts are what the cache maintains incrementally for a snapshot.
type SnapshotParts struct {
	Nodes      NodeList
	ImageNodes map[string]int // must not be modified afterwards
	// Topology must stay valid for Nodes' labels (nil: a new one); Affinity must not change afterwards.
	Topology *TopologyIndex
	Affinity *AffinityRegistry
}

// NewSnapshotFromParts wraps parts without copying.
func NewSnapshotFromParts(p SnapshotParts) *Snapshot {
	s := &Snapshot{nodes: p.Nodes, imageNodes: p.ImageNodes, topology: p.Topology}
	if s.topology == nil {
		s.topology = NewTopologyIndex()
	}
	if r := p.Affinity; r != nil {
		s.antiTerms, s.scoringPods = r.Terms(), r.scoring > 0
	}
	return s
}

// NewSnapshot wraps nodes, which must be sorted by name and must not be modified afterwards, and derives
// the affinity registry and image counts from them (O(nodes)).
func NewSnapshot(nodes []*NodeInfo) *Snapshot {
	var imageNodes map[string]int
	var reg AffinityRegistry
	for _, n := range nodes {
		reg.Update(nil, n)
		for img := range n.ImageSizes {
			if imageNodes == nil {
				imageNodes = map[string]int{}
			}
			imageNodes[img]++
		}
	}
	return NewSnapshotFromParts(SnapshotParts{Nodes: NodeListOf(nodes), ImageNodes: imageNodes, Affinity: &reg})
}

// SnapshotOf sorts a copy of nodes by name (tests and tools).
func SnapshotOf(nodes ...*NodeInfo) *Snapshot {
	s := append([]*NodeInfo(nil), nodes...)
	sort.Slice(s, func(i, j int) bool { return s[i].Name() < s[j].Name() })
	return NewSnapshot(s)
}

// HavePodsWithAffinity returns the nodes hosting a pod with pod (anti-)affinity, in name order.
func (s *Snapshot) HavePodsWithAffinity() []*NodeInfo {
	return s.flatAffinity.get(func() []*NodeInfo { return s.nodesWith(func(n *NodeInfo) bool { return len(n.PodsWithAffinity) > 0 }) })
}

// HavePodsWithRequiredAntiAffinity returns the nodes hosting a pod with required anti-affinity.
func (s *Snapshot) HavePodsWithRequiredAntiAffinity() []*NodeInfo {
	return s.flatAnti.get(func() []*NodeInfo {
		return s.nodesWith(func(n *NodeInfo) bool { return len(n.PodsWithRequiredAntiAffinity) > 0 })
	})
}

func (s *Snapshot) nodesWith(keep func(*NodeInfo) bool) []*NodeInfo {
	var out []*NodeInfo
	for n := range s.nodes.From(0) {
		if keep(n) {
			out = append(out, n)
		}
	}
	return out
}

// ImageNumNodes returns how many nodes hold image (a normalised name).
func (s *Snapshot) ImageNumNodes(image string) int { return s.imageNodes[image] }

// Nodes returns the nodes in name order; callers must not modify the slice. The first call per
// snapshot builds it: loops that visit only some nodes use NodesFrom.
func (s *Snapshot) Nodes() []*NodeInfo { return s.flat.get(s.nodes.Flatten) }

// NodesFrom yields every node once, in name order from index start, wrapping around.
func (s *Snapshot) NodesFrom(start int) iter.Seq[*NodeInfo] { return s.nodes.From(start) }

// NumNodes is the number of nodes.
func (s *Snapshot) NumNodes() int { return s.nodes.Len() }

// Get returns the node called name, or nil.
func (s *Snapshot) Get(name string) *NodeInfo { return s.nodes.Get(name) }
