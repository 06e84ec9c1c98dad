// Package schedtest has builders for scheduler tests, in the spirit of kube-scheduler's st package:
//
//	schedtest.Node("n1").Capacity("4", "8Gi", 110).Label("zone", "a").Ready().Obj()
//	schedtest.Pod("web", "uid-1").Req("500m", "1Gi").Obj()
package schedtest

import (
	"strconv"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
)

// NodeWrapper builds a pb.Node.
type NodeWrapper struct{ n *pb.Node }

// Node starts a node with no capacity and no conditions.
func Node(name string) *NodeWrapper {
	return &NodeWrapper{n: &pb.Node{
		Metadata: &pb.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec:     &pb.NodeSpec{},
		Status:   &pb.NodeStatus{Capacity: map[string]string{}, Allocatable: map[string]string{}},
	}}
}

// Capacity sets capacity and allocatable cpu, memory and pods ("" leaves a resource out).
func (w *NodeWrapper) Capacity(cpu, memory string, pods int) *NodeWrapper {
	set := func(k, v string) {
		if v != "" {
			w.n.Status.Capacity[k] = v
			w.n.Status.Allocatable[k] = v
		}
	}
	set(podutil.CPU, cpu)
	set(podutil.Memory, memory)
	if pods > 0 {
		set(podutil.Pods, strconv.Itoa(pods))
	}
	return w
}

// Allocatable sets one allocatable (and capacity) resource.
func (w *NodeWrapper) Allocatable(name, q string) *NodeWrapper {
	w.n.Status.Capacity[name] = q
	w.n.Status.Allocatable[name] = q
	return w
}

// Label adds a label.
func (w *NodeWrapper) Label(k, v string) *NodeWrapper { w.n.Metadata.Labels[k] = v; return w }

// Taint adds a taint.
func (w *NodeWrapper) Taint(key, value, effect string) *NodeWrapper {
	w.n.Spec.Taints = append(w.n.Spec.Taints, &pb.Taint{Key: key, Value: value, Effect: effect})
	return w
}

// Unschedulable cordons the node.
func (w *NodeWrapper) Unschedulable() *NodeWrapper { w.n.Spec.Unschedulable = true; return w }

// Ready sets the Ready condition to True.
func (w *NodeWrapper) Ready() *NodeWrapper { return w.Condition(podutil.NodeReady, podutil.True) }

// Condition sets a condition.
func (w *NodeWrapper) Condition(typ, status string) *NodeWrapper {
	for _, c := range w.n.Status.Conditions {
		if c.Type == typ {
			c.Status = status
			return w
		}
	}
	w.n.Status.Conditions = append(w.n.Status.Conditions, &pb.NodeCondition{Type: typ, Status: status})
	return w
}

// Obj returns the node.
func (w *NodeWrapper) Obj() *pb.Node { return w.n }

// Info returns a NodeInfo with nothing requested.
func (w *NodeWrapper) Info() *framework.NodeInfo { return framework.NewNodeInfo(w.n) }

// InfoRequested returns a NodeInfo with req already requested on the node (as committed pods).
func (w *NodeWrapper) InfoRequested(req *pb.Resources) *framework.NodeInfo {
	ni := framework.NewNodeInfo(w.n)
	ni.Requested = framework.ResourceOf(req)
	ni.NonZeroMilliCPU, ni.NonZeroMemory = req.GetMilliCpu(), req.GetMemory()
	return ni
}

// PodWrapper builds a pb.Pod.
type PodWrapper struct{ p *pb.Pod }

// Pod starts a pod in namespace "default" with one container and no requests.
func Pod(name, uid string) *PodWrapper {
	return &PodWrapper{p: &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: name, Namespace: "default", Uid: uid},
		Spec:     &pb.PodSpec{Containers: []*pb.Container{{Name: "c", Image: "nginx", Resources: &pb.ResourceRequirements{Requests: map[string]string{}}}}},
		Status:   &pb.PodStatus{Phase: "Pending"},
		Internal: &pb.PodInternal{CorrelationId: "corr-" + uid},
	}}
}

// Req sets the container's cpu and memory requests ("" leaves one out).
func (w *PodWrapper) Req(cpu, memory string) *PodWrapper {
	r := w.p.Spec.Containers[0].Resources.Requests
	if cpu != "" {
		r[podutil.CPU] = cpu
	}
	if memory != "" {
		r[podutil.Memory] = memory
	}
	return w
}

// Request sets one container request.
func (w *PodWrapper) Request(name, q string) *PodWrapper {
	w.p.Spec.Containers[0].Resources.Requests[name] = q
	return w
}

// NodeSelector adds a nodeSelector entry.
func (w *PodWrapper) NodeSelector(k, v string) *PodWrapper {
	if w.p.Spec.NodeSelector == nil {
		w.p.Spec.NodeSelector = map[string]string{}
	}
	w.p.Spec.NodeSelector[k] = v
	return w
}

// NodeName sets spec.nodeName.
func (w *PodWrapper) NodeName(n string) *PodWrapper { w.p.Spec.NodeName = n; return w }

func (w *PodWrapper) nodeAffinity() *pb.NodeAffinity {
	if w.p.Spec.Affinity == nil {
		w.p.Spec.Affinity = &pb.Affinity{}
	}
	if w.p.Spec.Affinity.NodeAffinity == nil {
		w.p.Spec.Affinity.NodeAffinity = &pb.NodeAffinity{}
	}
	return w.p.Spec.Affinity.NodeAffinity
}

// RequiredTerm adds a required node affinity term (terms are ORed).
func (w *PodWrapper) RequiredTerm(t *pb.NodeSelectorTerm) *PodWrapper {
	na := w.nodeAffinity()
	if na.Required == nil {
		na.Required = &pb.NodeSelector{}
	}
	na.Required.Terms = append(na.Required.Terms, t)
	return w
}

// PreferredTerm adds a preferred node affinity term.
func (w *PodWrapper) PreferredTerm(weight int32, t *pb.NodeSelectorTerm) *PodWrapper {
	na := w.nodeAffinity()
	na.Preferred = append(na.Preferred, &pb.PreferredSchedulingTerm{Weight: weight, Preference: t})
	return w
}

// Toleration adds a toleration.
func (w *PodWrapper) Toleration(key, op, value, effect string) *PodWrapper {
	w.p.Spec.Tolerations = append(w.p.Spec.Tolerations, &pb.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	return w
}

// Obj returns the pod.
func (w *PodWrapper) Obj() *pb.Pod { return w.p }

// Info returns the PodInfo.
func (w *PodWrapper) Info() *framework.PodInfo { return framework.NewPodInfo(w.p) }

// Expr is a NodeSelectorRequirement.
func Expr(key, op string, values ...string) *pb.NodeSelectorRequirement {
	return &pb.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

// Term ANDs expressions into one NodeSelectorTerm.
func Term(exprs ...*pb.NodeSelectorRequirement) *pb.NodeSelectorTerm {
	return &pb.NodeSelectorTerm{MatchExpressions: exprs}
}

// FieldTerm is a term on metadata.name.
func FieldTerm(op string, values ...string) *pb.NodeSelectorTerm {
	return &pb.NodeSelectorTerm{MatchFields: []*pb.NodeSelectorRequirement{Expr("metadata.name", op, values...)}}
}

// Labels sets pod labels (k1, v1, k2, v2, ...).
func (w *PodWrapper) Labels(kv ...string) *PodWrapper {
	if w.p.Metadata.Labels == nil {
		w.p.Metadata.Labels = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		w.p.Metadata.Labels[kv[i]] = kv[i+1]
	}
	return w
}

// Namespace sets the namespace.
func (w *PodWrapper) Namespace(ns string) *PodWrapper { w.p.Metadata.Namespace = ns; return w }

// Image sets the container's image.
func (w *PodWrapper) Image(img string) *PodWrapper { w.p.Spec.Containers[0].Image = img; return w }

func (w *PodWrapper) affinity() *pb.Affinity {
	if w.p.Spec.Affinity == nil {
		w.p.Spec.Affinity = &pb.Affinity{}
	}
	if w.p.Spec.Affinity.PodAffinity == nil {
		w.p.Spec.Affinity.PodAffinity = &pb.PodAffinity{}
	}
	if w.p.Spec.Affinity.PodAntiAffinity == nil {
		w.p.Spec.Affinity.PodAntiAffinity = &pb.PodAffinity{}
	}
	return w.p.Spec.Affinity
}

// PodAffinity adds a required pod affinity term.
func (w *PodWrapper) PodAffinity(t *pb.PodAffinityTerm) *PodWrapper {
	a := w.affinity().PodAffinity
	a.Required = append(a.Required, t)
	return w
}

// PodAntiAffinity adds a required pod anti-affinity term.
func (w *PodWrapper) PodAntiAffinity(t *pb.PodAffinityTerm) *PodWrapper {
	a := w.affinity().PodAntiAffinity
	a.Required = append(a.Required, t)
	return w
}

// PreferredPodAffinity adds a preferred pod affinity term.
func (w *PodWrapper) PreferredPodAffinity(weight int32, t *pb.PodAffinityTerm) *PodWrapper {
	a := w.affinity().PodAffinity
	a.Preferred = append(a.Preferred, &pb.WeightedPodAffinityTerm{Weight: weight, Term: t})
	return w
}

// PreferredPodAntiAffinity adds a preferred pod anti-affinity term.
func (w *PodWrapper) PreferredPodAntiAffinity(weight int32, t *pb.PodAffinityTerm) *PodWrapper {
	a := w.affinity().PodAntiAffinity
	a.Preferred = append(a.Preferred, &pb.WeightedPodAffinityTerm{Weight: weight, Term: t})
	return w
}

// Spread adds a topology spread constraint.
func (w *PodWrapper) Spread(c *pb.TopologySpreadConstraint) *PodWrapper {
	w.p.Spec.TopologySpreadConstraints = append(w.p.Spec.TopologySpreadConstraints, c)
	return w
}

// Placed returns the pod as it counts on a node, committed (as an alloc record lists it).
func (w *PodWrapper) Placed() *framework.PlacedPod {
	p := framework.NewPodInfo(w.p).Placed()
	p.Confirm()
	return p
}

// Priority sets spec.priority.
func (w *PodWrapper) Priority(p int32) *PodWrapper { w.p.Spec.Priority = &p; return w }

// Image adds an image to the node's status.
func (w *NodeWrapper) Image(size int64, names ...string) *NodeWrapper {
	w.n.Status.Images = append(w.n.Status.Images, &pb.ContainerImage{Names: names, SizeBytes: size})
	return w
}

// Selector is a LabelSelector with matchLabels (k1, v1, ...) and expressions.
func Selector(kv []string, exprs ...*pb.LabelSelectorRequirement) *pb.LabelSelector {
	s := &pb.LabelSelector{MatchExpressions: exprs}
	for i := 0; i+1 < len(kv); i += 2 {
		if s.MatchLabels == nil {
			s.MatchLabels = map[string]string{}
		}
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

// LabelExpr is a LabelSelectorRequirement.
func LabelExpr(key, op string, values ...string) *pb.LabelSelectorRequirement {
	return &pb.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}

// AffinityTerm is a PodAffinityTerm.
func AffinityTerm(topologyKey string, sel *pb.LabelSelector, namespaces ...string) *pb.PodAffinityTerm {
	return &pb.PodAffinityTerm{TopologyKey: topologyKey, LabelSelector: sel, Namespaces: namespaces}
}
