// Package podutil holds small helpers over the podbus protobuf types shared by several services:
// resource arithmetic, conditions and phases.
package podutil

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/resource"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Resource names.
const (
	CPU              = "cpu"
	Memory           = "memory"
	EphemeralStorage = "ephemeral-storage"
	Pods             = "pods"
)

// Parse turns a Kubernetes resource list into integer units. Unparseable quantities count as zero
// (admission rejects them, so they never reach here).
func Parse(list map[string]string) *pb.Resources {
	r := &pb.Resources{}
	for name, q := range list {
		v, err := resource.ParseQuantity(q)
		if err != nil {
			continue
		}
		switch name {
		case CPU:
			r.MilliCpu = v.MilliValue()
		case Memory:
			r.Memory = v.Value()
		case EphemeralStorage:
			r.EphemeralStorage = v.Value()
		case Pods:
			r.Pods = v.Value()
		default:
			if r.Scalar == nil {
				r.Scalar = map[string]int64{}
			}
			r.Scalar[name] = v.Value()
		}
	}
	return r
}

// PodRequests is what a pod asks of a node, as kube-scheduler computes it: the sum over containers,
// at least the largest init container, and one pod.
func PodRequests(p *pb.Pod) *pb.Resources {
	sum := &pb.Resources{}
	for _, c := range p.GetSpec().GetContainers() {
		Add(sum, Parse(c.GetResources().GetRequests()))
	}
	for _, c := range p.GetSpec().GetInitContainers() {
		Max(sum, Parse(c.GetResources().GetRequests()))
	}
	sum.Pods = 1
	return sum
}

// Add adds b to a.
func Add(a, b *pb.Resources) {
	a.MilliCpu += b.GetMilliCpu()
	a.Memory += b.GetMemory()
	a.EphemeralStorage += b.GetEphemeralStorage()
	a.Pods += b.GetPods()
	for k, v := range b.GetScalar() {
		if a.Scalar == nil {
			a.Scalar = map[string]int64{}
		}
		a.Scalar[k] += v
	}
}

// Sub subtracts b from a.
func Sub(a, b *pb.Resources) {
	a.MilliCpu -= b.GetMilliCpu()
	a.Memory -= b.GetMemory()
	a.EphemeralStorage -= b.GetEphemeralStorage()
	a.Pods -= b.GetPods()
	for k, v := range b.GetScalar() {
		if a.Scalar == nil {
			a.Scalar = map[string]int64{}
		}
		a.Scalar[k] -= v
		if a.Scalar[k] == 0 {
			delete(a.Scalar, k)
		}
	}
}

// Max raises each field of a to b's where b is larger.
func Max(a, b *pb.Resources) {
	a.MilliCpu = max(a.MilliCpu, b.GetMilliCpu())
	a.Memory = max(a.Memory, b.GetMemory())
	a.EphemeralStorage = max(a.EphemeralStorage, b.GetEphemeralStorage())
	for k, v := range b.GetScalar() {
		if a.Scalar == nil {
			a.Scalar = map[string]int64{}
		}
		a.Scalar[k] = max(a.Scalar[k], v)
	}
}

// Insufficient lists the resources ("cpu", "memory", "pods", ...) for which used+req exceeds alloc.
// A resource the node does not list counts as zero allocatable, except ephemeral-storage, which is
// only checked when the node declares it.
func Insufficient(alloc, used, req *pb.Resources) []string {
	var out []string
	if req.GetPods() > 0 && used.GetPods()+req.GetPods() > alloc.GetPods() {
		out = append(out, Pods)
	}
	if req.GetMilliCpu() > 0 && used.GetMilliCpu()+req.GetMilliCpu() > alloc.GetMilliCpu() {
		out = append(out, CPU)
	}
	if req.GetMemory() > 0 && used.GetMemory()+req.GetMemory() > alloc.GetMemory() {
		out = append(out, Memory)
	}
	if req.GetEphemeralStorage() > 0 && alloc.GetEphemeralStorage() > 0 &&
		used.GetEphemeralStorage()+req.GetEphemeralStorage() > alloc.GetEphemeralStorage() {
		out = append(out, EphemeralStorage)
	}
	for k, v := range req.GetScalar() {
		if v > 0 && used.GetScalar()[k]+v > alloc.GetScalar()[k] {
			out = append(out, k)
		}
	}
	return out
}

// NodeAllocatable is the node's allocatable, falling back to its capacity.
func NodeAllocatable(n *pb.Node) *pb.Resources {
	if a := n.GetStatus().GetAllocatable(); len(a) > 0 {
		return Parse(a)
	}
	return Parse(n.GetStatus().GetCapacity())
}

// Condition types and statuses.
const (
	PodScheduled    = "PodScheduled"
	PodInitialized  = "Initialized"
	ContainersReady = "ContainersReady"
	PodReady        = "Ready"
	NodeReady       = "Ready"
	True            = "True"
	False           = "False"
	Unknown         = "Unknown"
)

// PodCondition returns the condition of type t, or nil.
func PodCondition(p *pb.Pod, t string) *pb.PodCondition {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// SetPodCondition sets a condition, keeping lastTransitionTime when the status does not change.
// It reports whether anything changed.
func SetPodCondition(p *pb.Pod, c *pb.PodCondition, now time.Time) bool {
	if p.Status == nil {
		p.Status = &pb.PodStatus{}
	}
	for i, old := range p.Status.Conditions {
		if old.GetType() != c.GetType() {
			continue
		}
		if old.GetStatus() == c.GetStatus() && old.GetReason() == c.GetReason() && old.GetMessage() == c.GetMessage() {
			return false
		}
		if c.LastTransitionTime == nil {
			if old.GetStatus() == c.GetStatus() {
				c.LastTransitionTime = old.LastTransitionTime
			} else {
				c.LastTransitionTime = timestamppb.New(now)
			}
		}
		p.Status.Conditions[i] = c
		return true
	}
	if c.LastTransitionTime == nil {
		c.LastTransitionTime = timestamppb.New(now)
	}
	p.Status.Conditions = append(p.Status.Conditions, c)
	return true
}

// NodeCondition returns the node condition of type t, or nil.
func NodeCondition(n *pb.Node, t string) *pb.NodeCondition {
	for _, c := range n.GetStatus().GetConditions() {
		if c.GetType() == t {
			return c
		}
	}
	return nil
}

// NodeIsReady reports whether the node's Ready condition is True.
func NodeIsReady(n *pb.Node) bool {
	c := NodeCondition(n, NodeReady)
	return c != nil && c.GetStatus() == True
}

// IsTerminal reports whether the pod has finished (Succeeded or Failed).
func IsTerminal(p *pb.Pod) bool {
	ph := p.GetStatus().GetPhase()
	return ph == "Succeeded" || ph == "Failed"
}

// AnnotationAgent marks a node an agent heartbeats for; the status service sets it on every heartbeat.
// Only such nodes are marked Ready=Unknown when their heartbeats stop: a node registered through the API
// or by nodepool.Register (kwok-style, no agent) keeps the status it was given until an agent heartbeats
// for it.
const AnnotationAgent = "podbus.io/agent"

// ConstraintGroup names the pods whose scheduling constraints concern each other: pods of one namespace
// with the same inter-pod affinity, anti-affinity and topology spread constraints, as the replicas of one
// workload have. "" for a pod without such constraints. Schedulers use it to decide a group's pods in
// one replica (see bus.PendingSubject); pods of different groups that still concern each other are
// caught by the binder's commit check.
func ConstraintGroup(p *pb.Pod) string {
	spec := p.GetSpec()
	aff := spec.GetAffinity()
	if len(spec.GetTopologySpreadConstraints()) == 0 && aff.GetPodAffinity() == nil && aff.GetPodAntiAffinity() == nil {
		return ""
	}
	key := &pb.PodSpec{TopologySpreadConstraints: spec.GetTopologySpreadConstraints()}
	if aff.GetPodAffinity() != nil || aff.GetPodAntiAffinity() != nil {
		key.Affinity = &pb.Affinity{PodAffinity: aff.GetPodAffinity(), PodAntiAffinity: aff.GetPodAntiAffinity()}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(key)
	if err != nil {
		return p.GetMetadata().GetNamespace() // still one group per namespace
	}
	return p.GetMetadata().GetNamespace() + "\x00" + string(b)
}

// Node lifecycle taints, and the deletion reason of the pods their NoExecute effect evicts (the store
// sets the DisruptionTarget condition for it, as kube's taint-eviction controller does).
const (
	TaintNodeNotReady          = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable       = "node.kubernetes.io/unreachable"
	ReasonTaintManagerEviction = "TaintManagerEviction"
	// ReasonEviction is the deletion reason of a pod evicted through the eviction subresource.
	ReasonEviction = "Eviction"
)

// MergeUpdate is the object the store writes for an update: the command's metadata and spec over the
// current status and bookkeeping, so an update never rolls status back. Fields owned by other writers
// (identity, deletion, the binder's nodeName) also stay as stored: a client's stale copy must not undo
// them. The API compares a stored pod with it when the store's answer to an update is lost.
func MergeUpdate(cur, want *pb.Pod) *pb.Pod {
	next := proto.Clone(want).(*pb.Pod)
	next.Status = cur.GetStatus()
	next.Internal = cur.GetInternal()
	if next.Metadata == nil {
		next.Metadata = &pb.ObjectMeta{}
	}
	cm := cur.GetMetadata()
	next.Metadata.Uid = cm.GetUid()
	next.Metadata.CreationTimestamp = cm.GetCreationTimestamp()
	next.Metadata.DeletionTimestamp = cm.GetDeletionTimestamp()
	next.Metadata.DeletionGracePeriodSeconds = cm.DeletionGracePeriodSeconds
	if next.Spec == nil {
		next.Spec = &pb.PodSpec{}
	}
	next.Spec.NodeName = cur.GetSpec().GetNodeName()
	return next
}
