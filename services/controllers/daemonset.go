package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/sched/framework"
	"github.com/podbus/podbus/sched/plugins/nodeaffinity"
)

// The DaemonSet controller, as kube's: for every DaemonSet, one pod per node that should run it.
//
//	node eligible (nodeSelector, required node affinity, NoSchedule/NoExecute taints tolerated) and no
//	  pod there  ──▶ create one, pinned to the node by a required matchFields metadata.name term (the
//	                 scheduler binds it), tolerating what kube's daemon pods tolerate (not-ready and
//	                 unreachable NoExecute forever: a dead node's pod stays and is not made elsewhere)
//	a NoExecute taint not tolerated, the node gone, or a failed pod ──▶ delete the pod
//	RollingUpdate: old pods deleted while fewer than maxUnavailable nodes lack an available pod; the
//	                 new pod is made once the old one is gone. OnDelete: only deleted pods are replaced.
//
// A daemon pod's name derives from the DaemonSet's uid and the node, so replicas racing to create it
// make one (the store refuses the second), and a replacement waits for its predecessor to be gone.

// Labels kube's DaemonSet controller sets on its pods.
const (
	labelRevisionHash = "controller-revision-hash"
	labelTemplateGen  = "pod-template-generation"
)

// Event reasons, kube's.
const (
	reasonSuccessfulCreate = "SuccessfulCreate"
	reasonSuccessfulDelete = "SuccessfulDelete"
)

// Why the controller deletes a daemon pod, in the audit timeline and the log.
const (
	reasonPodFailed       = "DaemonPodFailed"
	reasonNodeNotEligible = "NodeNotEligible"
	reasonDuplicate       = "DuplicateDaemonPod"
	reasonNodeGone        = "NodeDeleted"
	reasonRollingUpdate   = "RollingUpdate"
)

// daemonTolerations are what kube adds to every daemon pod (AddOrUpdateDaemonPodTolerations).
var daemonTolerations = []corev1.Toleration{
	{Key: podutil.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: podutil.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: "node.kubernetes.io/disk-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: "node.kubernetes.io/memory-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: "node.kubernetes.io/pid-pressure", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: "node.kubernetes.io/unschedulable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// daemonPod is a DaemonSet's pod template as a pod, without node: what nodes are judged against.
func daemonPod(ds *appsv1.DaemonSet) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: *ds.Spec.Template.ObjectMeta.DeepCopy(), Spec: *ds.Spec.Template.Spec.DeepCopy()}
	p.Namespace = ds.Namespace
	for _, t := range daemonTolerations {
		if !slices.ContainsFunc(p.Spec.Tolerations, func(x corev1.Toleration) bool { return x.Key == t.Key && x.Effect == t.Effect }) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, t)
		}
	}
	if p.Spec.HostNetwork {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "node.kubernetes.io/network-unavailable",
			Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return p
}

// eligibility says whether a node should run a daemon pod (new pods are made there) and whether one
// already there may continue running, as kube's NodeShouldRunDaemonPod.
func eligibility(tpl *pb.Pod, req *nodeaffinity.Required, n *pb.Node) (run, stay bool) {
	if !req.Match(n) {
		return false, false
	}
	run, stay = true, true
	for _, t := range n.GetSpec().GetTaints() {
		if t.GetEffect() != framework.TaintEffectNoSchedule && t.GetEffect() != framework.TaintEffectNoExecute {
			continue
		}
		if framework.TolerationsTolerateTaint(tpl.GetSpec().GetTolerations(), t) {
			continue
		}
		run = false
		if t.GetEffect() == framework.TaintEffectNoExecute {
			stay = false
		}
	}
	return run, stay
}

// templateHash names a template: pods carrying another are out of date.
func templateHash(t *corev1.PodTemplateSpec) string {
	data, _ := json.Marshal(t)
	h := fnv.New32a()
	_, _ = h.Write(data)
	return strconv.FormatUint(uint64(h.Sum32()), 36)
}

// daemonPodName is the name of ds's pod on node.
func daemonPodName(ds *appsv1.DaemonSet, node string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(string(ds.UID) + "/" + node))
	suffix := strconv.FormatUint(uint64(h.Sum32()), 36)
	base := ds.Name
	if len(base) > 63-len(suffix)-1 {
		base = base[:63-len(suffix)-1]
	}
	return base + "-" + suffix
}

// podNode is the node a daemon pod is for: where it is bound, else its matchFields term's.
func podNode(p *pb.Pod) string {
	if n := p.GetSpec().GetNodeName(); n != "" {
		return n
	}
	for _, t := range p.GetSpec().GetAffinity().GetNodeAffinity().GetRequired().GetTerms() {
		for _, f := range t.GetMatchFields() {
			if f.GetKey() == "metadata.name" && f.GetOperator() == "In" && len(f.GetValues()) == 1 {
				return f.GetValues()[0]
			}
		}
	}
	return ""
}

// available is Ready for minReadySeconds.
func available(p *pb.Pod, minReady int32, now time.Time) bool {
	c := podutil.PodCondition(p, "Ready")
	if c.GetStatus() != podutil.True || p.GetMetadata().GetDeletionTimestamp() != nil {
		return false
	}
	return minReady == 0 || c.GetLastTransitionTime().AsTime().Add(time.Duration(minReady)*time.Second).Before(now)
}

func (s *Service) syncDaemonSet(ctx context.Context, key string) error {
	e := s.dsets[key]
	if e == nil || e.ds.DeletionTimestamp != nil {
		return nil // the collector deletes its pods
	}
	ds := e.ds
	now := s.cfg.now()
	tpl := daemonPod(ds)
	hash := templateHash(&ds.Spec.Template)
	var pods []*pb.Pod
	for _, pe := range s.pods {
		if pe.ns == ds.Namespace && pe.controlledBy(string(ds.UID)) {
			pods = append(pods, pe.pod())
		}
	}
	plan := planDaemonSet(ds, tpl, hash, s.nodes, pods, now)
	var errs []error
	for _, d := range plan.deletes {
		p := d.pod
		if err := s.deletePod(ctx, p, d.grace, UserDaemonSet, "ds", d.why); err != nil {
			errs = append(errs, err)
			continue
		}
		metrics.Count("controllers.daemonset.deleted", 1)
		s.log.Info("deleting daemon pod", "daemonset", key, "pod", p.GetMetadata().GetName(), "why", d.why)
		s.dsEvent(ds, reasonSuccessfulDelete, "Deleted pod: "+p.GetMetadata().GetName(), p.GetMetadata().GetUid(), now)
	}
	for _, node := range plan.create {
		if err := s.createDaemonPod(ctx, ds, tpl, node, hash, now); err != nil {
			errs = append(errs, err)
		}
	}
	if !equality.Semantic.DeepEqual(plan.status, ds.Status) {
		errs = append(errs, s.writeDaemonSetStatus(ctx, key, e, plan.status))
	}
	return errors.Join(errs...)
}

// daemonPlan is what a sync of a DaemonSet does: delete pods, in order, make a pod for each node of
// create, and store status.
type daemonPlan struct {
	deletes []daemonDeletion
	create  []string
	status  appsv1.DaemonSetStatus
}

type daemonDeletion struct {
	pod   *pb.Pod
	grace *int64
	why   string
}

// planDaemonSet decides a sync of ds, whose pod template is tpl (hash names it), over nodes and pods,
// the pods ds controls.
func planDaemonSet(ds *appsv1.DaemonSet, tpl *corev1.Pod, hash string, nodes map[string]*pb.Node, pods []*pb.Pod, now time.Time) daemonPlan {
	tplPB, _ := convert.PodToPB(tpl)
	req := nodeaffinity.GetRequired(tplPB)
	byNode := map[string][]*pb.Pod{}
	for _, p := range pods {
		n := podNode(p)
		byNode[n] = append(byNode[n], p)
	}
	var plan daemonPlan
	st := &plan.status
	var oldPods []*pb.Pod // out of date, on nodes that should run the daemon
	unavailable := 0
	del := func(p *pb.Pod, why string) {
		if p.GetMetadata().GetDeletionTimestamp() != nil {
			return
		}
		var grace *int64
		if nodes[p.GetSpec().GetNodeName()] == nil {
			grace = proto.Int64(0) // no agent left to confirm a graceful stop
		}
		plan.deletes = append(plan.deletes, daemonDeletion{pod: p, grace: grace, why: why})
	}
	for name, n := range nodes {
		run, stay := eligibility(tplPB, req, n)
		pods := byNode[name]
		delete(byNode, name)
		var live []*pb.Pod
		for _, p := range pods {
			if p.GetStatus().GetPhase() == "Failed" {
				del(p, reasonPodFailed)
				continue
			}
			live = append(live, p)
		}
		if !stay {
			for _, p := range live {
				del(p, reasonNodeNotEligible)
			}
			if len(live) > 0 {
				st.NumberMisscheduled++
			}
			continue
		}
		if !run && len(live) == 0 {
			continue
		}
		if !run {
			st.NumberMisscheduled++
			continue
		}
		st.DesiredNumberScheduled++
		if len(live) == 0 {
			if len(pods) == 0 {
				plan.create = append(plan.create, name)
			}
			unavailable++
			continue
		}
		st.CurrentNumberScheduled++
		// Extra pods on one node: keep the oldest.
		slices.SortFunc(live, func(a, b *pb.Pod) int {
			return a.GetMetadata().GetCreationTimestamp().AsTime().Compare(b.GetMetadata().GetCreationTimestamp().AsTime())
		})
		for _, p := range live[1:] {
			del(p, reasonDuplicate)
		}
		p := live[0]
		if podutil.PodCondition(p, "Ready").GetStatus() == podutil.True && p.GetMetadata().GetDeletionTimestamp() == nil {
			st.NumberReady++
		}
		isAvailable := available(p, ds.Spec.MinReadySeconds, now)
		if isAvailable {
			st.NumberAvailable++
		} else {
			unavailable++
		}
		if p.GetMetadata().GetLabels()[labelRevisionHash] == hash {
			st.UpdatedNumberScheduled++
		} else if p.GetMetadata().GetDeletionTimestamp() == nil {
			oldPods = append(oldPods, p)
		}
	}
	// Pods of nodes that are gone.
	for _, pods := range byNode {
		for _, p := range pods {
			del(p, reasonNodeGone)
		}
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		budget := maxUnavailable(ds, int(st.DesiredNumberScheduled)) - unavailable
		for _, p := range oldPods {
			switch {
			case !available(p, ds.Spec.MinReadySeconds, now):
				del(p, reasonRollingUpdate)
			case budget > 0:
				budget--
				del(p, reasonRollingUpdate)
			}
		}
	}
	st.NumberUnavailable = max(0, st.DesiredNumberScheduled-st.NumberAvailable)
	st.ObservedGeneration = ds.Generation
	st.CollisionCount, st.Conditions = ds.Status.CollisionCount, ds.Status.Conditions
	return plan
}

// maxUnavailable is the rolling update's maxUnavailable against desired nodes (at least 1).
func maxUnavailable(ds *appsv1.DaemonSet, desired int) int {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, desired, true)
	if err != nil {
		return 1
	}
	return max(1, n)
}

// createDaemonPod makes ds's pod for node, as the API would store it.
func (s *Service) createDaemonPod(ctx context.Context, ds *appsv1.DaemonSet, tpl *corev1.Pod, node, hash string, now time.Time) error {
	p := tpl.DeepCopy()
	p.Name = daemonPodName(ds, node)
	p.GenerateName = ds.Name + "-"
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[labelRevisionHash] = hash
	p.Labels[labelTemplateGen] = strconv.FormatInt(ds.Generation, 10)
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
		Controller: &yes, BlockOwnerDeletion: &yes}}
	// Pinned to the node as kube pins daemon pods: the node was judged here; the scheduler binds.
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
	convert.DefaultPod(p)
	p.UID = types.UID(uuid.NewString())
	p.CreationTimestamp = metav1.NewTime(now.Truncate(time.Second))
	p.Generation = 1
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: convert.QOSClass(p)}
	out, _ := convert.PodToPB(p)
	out.Internal = &pb.PodInternal{CorrelationId: uuid.NewString()}
	if err := s.createPod(ctx, out, UserDaemonSet); err != nil {
		return err
	}
	metrics.Count("controllers.daemonset.created", 1)
	s.dsEvent(ds, reasonSuccessfulCreate, "Created pod: "+p.Name, string(p.UID), now)
	return nil
}

// dsEvent records an event on a DaemonSet; best effort.
func (s *Service) dsEvent(ds *appsv1.DaemonSet, reason, msg, dedup string, now time.Time) {
	ref := &pb.ObjectReference{Kind: "DaemonSet", ApiVersion: "apps/v1", Namespace: ds.Namespace, Name: ds.Name, Uid: string(ds.UID)}
	if _, err := s.dsRec.Event(ref, "Normal", reason, msg, dedup, now); err != nil {
		s.log.Warn("record event", "daemonset", ds.Name, "err", err)
	}
}

// writeDaemonSetStatus stores st (compare-and-set at the revision watched; losing is no error).
func (s *Service) writeDaemonSetStatus(ctx context.Context, key string, e *dsEntry, st appsv1.DaemonSetStatus) error {
	next := e.ds.DeepCopy()
	next.Status = st
	next.ResourceVersion = ""
	data, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("encode daemonset %s: %w", key, err)
	}
	_, err = bus.UpdateEncoded(ctx, s.kv[bus.BucketDaemonSets], key, data, e.rev)
	if errors.Is(err, bus.ErrConflict) {
		return nil
	}
	return err
}
