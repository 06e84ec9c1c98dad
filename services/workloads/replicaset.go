package workloads

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// AnnotationExpected holds a ReplicaSet's claimed pod creations and deletions (expectations), which
// every replica of the controller honours: see claims.
const AnnotationExpected = "podbus.io/expected-pods"

// claims are the creations and deletions a replica decided and has not seen done yet, stored on the
// ReplicaSet with the compare-and-set that decided them. PodsRev is the pods-bucket revision its
// writer's cache was at: a replica whose cache is older cannot tell a claim it sees cleared from a pod
// it has not seen yet, so it waits.
type claims struct {
	PodsRev uint64           `json:"podsRev"`
	Create  map[string]int64 `json:"create,omitempty"` // pod name -> unix deadline
	Delete  map[string]int64 `json:"delete,omitempty"` // pod uid -> unix deadline
}

func readClaims(rs *appsv1.ReplicaSet) claims {
	var c claims
	if v := rs.Annotations[AnnotationExpected]; v != "" {
		_ = json.Unmarshal([]byte(v), &c) // a mangled annotation is no claim
	}
	if c.Create == nil {
		c.Create = map[string]int64{}
	}
	if c.Delete == nil {
		c.Delete = map[string]int64{}
	}
	return c
}

func (c claims) empty() bool { return len(c.Create) == 0 && len(c.Delete) == 0 }

func (c claims) annotation() string {
	data, _ := json.Marshal(c)
	return string(data)
}

// podName is the name of a ReplicaSet's pod in slot i: its name, a dash and five characters derived
// from the ReplicaSet's uid and the slot, so that replicas deciding the same creations choose the same
// names and the store's name uniqueness stops a duplicate.
func podName(rs *appsv1.ReplicaSet, slot int) string {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d", rs.UID, slot)
	suffix := rand.SafeEncodeString(strconv.FormatUint(h.Sum64(), 10))
	base := rs.Name
	if len(base) > 57 {
		base = base[:57]
	}
	return base + "-" + suffix[len(suffix)-5:]
}

func isActive(p *pb.Pod) bool {
	return p.GetMetadata().GetDeletionTimestamp() == nil && !podutil.IsTerminal(p)
}

func isReady(p *pb.Pod) bool {
	c := podutil.PodCondition(p, "Ready")
	return c != nil && c.GetStatus() == podutil.True
}

// isAvailable: ready for at least minReady seconds.
func isAvailable(p *pb.Pod, minReady int32, now time.Time) bool {
	if !isReady(p) {
		return false
	}
	if minReady == 0 {
		return true
	}
	c := podutil.PodCondition(p, "Ready")
	t := c.GetLastTransitionTime()
	return t != nil && !t.AsTime().Add(time.Duration(minReady)*time.Second).After(now)
}

// getRS reads a ReplicaSet from the bucket; bus.ErrNotFound when it is gone.
func (s *Service) getRS(ctx context.Context, ns, name string) (*rsEntry, error) {
	rs := &appsv1.ReplicaSet{}
	t, rev, err := getObject(ctx, s.rsKV, "replicaset", ns, name, rs)
	if err != nil {
		return nil, err
	}
	return &rsEntry{obj: rs, template: t, rev: rev}, nil
}

// getObject reads ns/name of a workload bucket into obj, returning its pod template and revision;
// bus.ErrNotFound when it is gone.
func getObject(ctx context.Context, kv jetstream.KeyValue, what, ns, name string, obj any) (*pb.Pod, uint64, error) {
	data, rev, err := bus.GetEncoded(ctx, kv, bus.ObjectKey(ns, name))
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s/%s: %w", what, ns, name, err)
	}
	t, err := workload.Decode(data, obj)
	if err != nil {
		return nil, 0, err
	}
	return t, rev, nil
}

// writeRS stores rs over revision rev (compare-and-set).
func (s *Service) writeRS(ctx context.Context, rs *appsv1.ReplicaSet, template *pb.Pod, rev uint64) (uint64, error) {
	data, err := workload.Encode(rs, template)
	if err != nil {
		return 0, err
	}
	return bus.UpdateEncoded(ctx, s.rsKV, bus.ObjectKey(rs.Namespace, rs.Name), data, rev)
}

// syncReplicaSet keeps a ReplicaSet's pods at its replicas and writes its status.
func (s *Service) syncReplicaSet(ctx context.Context, ns, name string) error {
	r, err := s.getRS(ctx, ns, name)
	if errors.Is(err, bus.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	rs := r.obj
	cl := readClaims(rs)
	hadClaims := !cl.empty()
	deleting := rs.DeletionTimestamp != nil
	pods, podsRev := s.c.podsFor(ns, string(rs.UID), !deleting)
	if podsRev < cl.PodsRev {
		return errRequeue // the claims' writer saw pods this cache has not yet
	}
	now := s.cfg.now()
	sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		return nil // the API validates selectors; an invalid one selects nothing
	}
	byName := map[string]*pb.Pod{}
	var owned []*pb.Pod
	var adopt, release []podEntry
	for _, pe := range pods {
		p := pe.pod
		md := p.GetMetadata()
		byName[md.GetName()] = p
		ref := controllerRefPB(md.GetOwnerReferences())
		matches := !sel.Empty() && sel.Matches(labels.Set(md.GetLabels()))
		switch {
		case ref != nil && ref.GetUid() == string(rs.UID):
			if matches || deleting {
				owned = append(owned, p)
			} else if md.GetDeletionTimestamp() == nil {
				release = append(release, pe)
			}
		case ref == nil && matches && !deleting && isActive(p):
			adopt = append(adopt, pe)
		}
	}
	// Claims seen done, or expired, are dropped.
	for n, until := range cl.Create {
		if p := byName[n]; (p != nil && isOwnedBy(p, rs)) || now.Unix() > until {
			delete(cl.Create, n)
		}
	}
	ownedUID := map[string]*pb.Pod{}
	for _, p := range owned {
		ownedUID[p.GetMetadata().GetUid()] = p
	}
	for uid, until := range cl.Delete {
		if p := ownedUID[uid]; p == nil || !isActive(p) || now.Unix() > until {
			delete(cl.Delete, uid)
		}
	}
	var active []*pb.Pod
	for _, p := range owned {
		if isActive(p) && cl.Delete[p.GetMetadata().GetUid()] == 0 {
			active = append(active, p)
		}
	}
	want := int(ptrOr(rs.Spec.Replicas, 1))
	var creates []string
	var deletes []*pb.Pod
	if !deleting {
		switch diff := want - len(active) - len(cl.Create); {
		case diff > 0:
			open, err := s.namespaceOpen(ctx, ns)
			if err != nil {
				return err
			}
			if !open {
				break // its namespace is going: the namespace controller deletes the pods and then this
			}
			creates = s.freeNames(rs, byName, cl, min(diff, s.cfg.MaxCreatesPerSync))
			deadline := now.Add(s.cfg.ClaimTTL).Unix()
			for _, n := range creates {
				cl.Create[n] = deadline
			}
		case diff < 0 && len(cl.Create) == 0:
			deletes = victims(active, -diff)
			deadline := now.Add(s.cfg.ClaimTTL).Unix()
			for _, p := range deletes {
				cl.Delete[p.GetMetadata().GetUid()] = deadline
			}
		}
	}
	status := rsStatus(rs, owned, now)
	next := rs.DeepCopy()
	next.Status = status
	if !cl.empty() || hadClaims {
		// Cleared claims keep the revision that saw them done: a replica whose cache is older would
		// take a pod it has not seen yet for one to create, or a deleted one for one to delete.
		cl.PodsRev = podsRev
		setAnnotation(&next.ObjectMeta, AnnotationExpected, cl.annotation())
	}
	if !equality.Semantic.DeepEqual(next, rs) {
		if _, err := s.writeRS(ctx, next, r.template, r.rev); err != nil {
			return err // a conflict: another replica decided from this revision; read again
		}
	}
	if len(creates)+len(deletes) > 0 {
		s.log.Debug("replicaset decided", "rs", rs.Name, "rev", r.rev, "want", want, "active", len(active), "claims", len(cl.Create), "creates", len(creates), "deletes", len(deletes), "podsRev", podsRev)
	}
	// Decided and claimed: act. A failure leaves the claim to expire and be decided again.
	var futures []jetstream.PubAckFuture
	for _, n := range creates {
		f, err := s.createPod(rs, r.template, n, r.rev)
		if err != nil {
			return err
		}
		futures = append(futures, f...)
	}
	for _, p := range deletes {
		f, err := s.deletePod(rs, p, r.rev)
		if err != nil {
			return err
		}
		futures = append(futures, f...)
	}
	var ownerErr error
	for _, c := range []struct {
		pods []podEntry
		own  bool
	}{{adopt, true}, {release, false}} {
		for _, pe := range c.pods {
			f, err := s.setController(ctx, pe, rs, c.own)
			switch {
			case err != nil:
				ownerErr = cmp.Or(ownerErr, err)
			case f != nil:
				futures = append(futures, f)
			}
		}
	}
	if err := bus.Wait(ctx, futures...); err != nil {
		return err
	}
	if ownerErr != nil {
		return ownerErr
	}
	metrics.Count("workloads.rs.synced", 1)
	return nil
}

func isOwnedBy(p *pb.Pod, rs *appsv1.ReplicaSet) bool {
	ref := controllerRefPB(p.GetMetadata().GetOwnerReferences())
	return ref != nil && ref.GetUid() == string(rs.UID)
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func setAnnotation(m *metav1.ObjectMeta, k, v string) {
	if v == "" {
		delete(m.Annotations, k)
		if len(m.Annotations) == 0 {
			m.Annotations = nil
		}
		return
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[k] = v
}

// freeNames picks n pod names for rs: its lowest slots whose names no pod of the namespace holds and no
// claim names.
func (s *Service) freeNames(rs *appsv1.ReplicaSet, byName map[string]*pb.Pod, cl claims, n int) []string {
	var out []string
	taken := map[string]bool{}
	for slot := 0; len(out) < n; slot++ {
		name := podName(rs, slot)
		if byName[name] != nil || cl.Create[name] != 0 || taken[name] || s.c.hasPod(rs.Namespace, name) {
			continue
		}
		taken[name] = true
		out = append(out, name)
	}
	return out
}

// victims are the n pods to delete first, as kube ranks them: unscheduled, pending, not ready, ready
// the shortest time, restarted most, newest; then by name, so replicas agree.
func victims(active []*pb.Pod, n int) []*pb.Pod {
	rank := func(p *pb.Pod) []int64 {
		var r []int64
		if p.GetSpec().GetNodeName() == "" {
			r = append(r, 0)
		} else {
			r = append(r, 1)
		}
		switch p.GetStatus().GetPhase() {
		case "Pending":
			r = append(r, 0)
		case "Unknown":
			r = append(r, 1)
		default:
			r = append(r, 2)
		}
		if isReady(p) {
			c := podutil.PodCondition(p, "Ready")
			r = append(r, 1, -c.GetLastTransitionTime().AsTime().Unix())
		} else {
			r = append(r, 0, 0)
		}
		var restarts int64
		for _, cs := range p.GetStatus().GetContainerStatuses() {
			restarts += int64(cs.GetRestartCount())
		}
		return append(r, -restarts, -p.GetMetadata().GetCreationTimestamp().AsTime().UnixNano())
	}
	sorted := slices.Clone(active)
	slices.SortStableFunc(sorted, func(a, b *pb.Pod) int {
		if c := slices.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		if a.GetMetadata().GetName() < b.GetMetadata().GetName() {
			return -1
		}
		return 1
	})
	return sorted[:min(n, len(sorted))]
}

func rsStatus(rs *appsv1.ReplicaSet, owned []*pb.Pod, now time.Time) appsv1.ReplicaSetStatus {
	st := appsv1.ReplicaSetStatus{ObservedGeneration: rs.Generation, Conditions: rs.Status.Conditions}
	templateLabels := labels.SelectorFromSet(rs.Spec.Template.Labels)
	for _, p := range owned {
		if !isActive(p) {
			continue
		}
		st.Replicas++
		if templateLabels.Matches(labels.Set(p.GetMetadata().GetLabels())) {
			st.FullyLabeledReplicas++
		}
		if isReady(p) {
			st.ReadyReplicas++
		}
		if isAvailable(p, rs.Spec.MinReadySeconds, now) {
			st.AvailableReplicas++
		}
	}
	return st
}

func ownerRef(apiVersion, kind, name, uid string) *pb.OwnerReference {
	t := true
	return &pb.OwnerReference{ApiVersion: apiVersion, Kind: kind, Name: name, Uid: uid, Controller: &t, BlockOwnerDeletion: &t}
}

func rsRef(rs *appsv1.ReplicaSet) *pb.ObjectReference {
	return &pb.ObjectReference{Kind: "ReplicaSet", ApiVersion: "apps/v1", Namespace: rs.Namespace, Name: rs.Name, Uid: string(rs.UID)}
}

// createPod sends the store the creation of one pod of rs, as the API's create does, and records the
// event. rev (the ReplicaSet's revision that decided it) makes the event the same for every replica.
func (s *Service) createPod(rs *appsv1.ReplicaSet, template *pb.Pod, name string, rev uint64) ([]jetstream.PubAckFuture, error) {
	if template == nil {
		return nil, fmt.Errorf("replicaset %s/%s has no stored template", rs.Namespace, rs.Name)
	}
	p := proto.Clone(template).(*pb.Pod)
	if p.Metadata == nil {
		p.Metadata = &pb.ObjectMeta{}
	}
	uid := uuid.NewString()
	md := p.Metadata
	md.Name, md.GenerateName, md.Namespace, md.Uid = name, rs.Name+"-", rs.Namespace, uid
	md.Generation = 1
	md.CreationTimestamp = timestamppb.New(s.cfg.now().Truncate(time.Second))
	md.DeletionTimestamp, md.DeletionGracePeriodSeconds, md.Finalizers = nil, nil, nil
	md.OwnerReferences = []*pb.OwnerReference{ownerRef("apps/v1", "ReplicaSet", rs.Name, string(rs.UID))}
	correlation := uuid.NewString()
	p.Internal = &pb.PodInternal{CorrelationId: correlation}
	f, err := s.pub.PublishAsync(bus.SubjPodCreate, &pb.PodCommand{Op: pb.PodCommand_OP_CREATE, Pod: p, User: UserReplicaSet,
		// Half the claim's time: the other half covers the store's write after its check, and clocks.
		NotAfter: timestamppb.New(s.cfg.now().Add(s.cfg.ClaimTTL / 2))}, bus.Meta{
		MsgID: "create-" + uid, Correlation: correlation, PodUID: uid, Key: rs.Namespace + "/" + name, User: UserReplicaSet,
	})
	if err != nil {
		return nil, err
	}
	metrics.Count("workloads.pods.created", 1)
	ev, err := s.rsEv.Event(rsRef(rs), "Normal", "SuccessfulCreate", "Created pod: "+name, fmt.Sprintf("%s/%d", name, rev), time.Time{})
	if err != nil {
		return []jetstream.PubAckFuture{f}, nil
	}
	return []jetstream.PubAckFuture{f, ev}, nil
}

// deletePod sends the store the deletion of one pod of rs (one command per pod however many replicas
// send it) and records the event.
func (s *Service) deletePod(rs *appsv1.ReplicaSet, p *pb.Pod, rev uint64) ([]jetstream.PubAckFuture, error) {
	md := p.GetMetadata()
	cmd := &pb.PodCommand{
		Op:   pb.PodCommand_OP_DELETE,
		Pod:  &pb.Pod{Metadata: &pb.ObjectMeta{Name: md.GetName(), Namespace: md.GetNamespace(), Uid: md.GetUid()}},
		User: UserReplicaSet, PreconditionUid: md.GetUid(), Reason: ReasonScaleDown,
	}
	f, err := s.pub.PublishAsync(bus.SubjPodDelete, cmd, bus.Meta{
		MsgID: "rsdelete-" + md.GetUid(), Correlation: p.GetInternal().GetCorrelationId(), PodUID: md.GetUid(),
		Key: md.GetNamespace() + "/" + md.GetName(), User: UserReplicaSet,
	})
	if err != nil {
		return nil, err
	}
	metrics.Count("workloads.pods.deleted", 1)
	ev, err := s.rsEv.Event(rsRef(rs), "Normal", "SuccessfulDelete", "Deleted pod: "+md.GetName(), fmt.Sprintf("%s/%d", md.GetUid(), rev), time.Time{})
	if err != nil {
		return []jetstream.PubAckFuture{f}, nil
	}
	return []jetstream.PubAckFuture{f, ev}, nil
}

// setController adopts (own) or releases a pod through the store's update. The command carries the
// whole pod, as an API update does, which the cache does not keep: it is read from the bucket, and
// only at the revision the decision read (errRequeue otherwise: the sync decides again once the cache
// has the newer pod), and the store applies it only at that revision: a change in between is a 409
// and the next sync decides again. A pod gone meanwhile is left alone (nil, nil).
func (s *Service) setController(ctx context.Context, pe podEntry, rs *appsv1.ReplicaSet, own bool) (jetstream.PubAckFuture, error) {
	cached := pe.pod.GetMetadata()
	p := &pb.Pod{}
	rev, err := bus.Get(ctx, s.pods, bus.PodKey(cached.GetNamespace(), cached.GetName()), p)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if rev != pe.rev {
		return nil, errRequeue
	}
	correlation := p.GetInternal().GetCorrelationId()
	md := p.GetMetadata()
	refs := slices.DeleteFunc(md.OwnerReferences, func(r *pb.OwnerReference) bool { return r.GetUid() == string(rs.UID) })
	if own {
		refs = append(refs, ownerRef("apps/v1", "ReplicaSet", rs.Name, string(rs.UID)))
	}
	md.OwnerReferences = refs
	p.Internal = nil
	op := "release"
	if own {
		op = "adopt"
	}
	return s.pub.PublishAsync(bus.SubjPodUpdate, &pb.PodCommand{Op: pb.PodCommand_OP_UPDATE, Pod: p, User: UserReplicaSet, ExpectedRevision: rev}, bus.Meta{
		// The revision is part of the id: a decision taken again on a newer pod (after a 409) is a new
		// command, not a duplicate.
		MsgID: fmt.Sprintf("%s-%s-%s-%d", op, md.GetUid(), rs.UID, rev), Correlation: correlation, PodUID: md.GetUid(),
		Key: md.GetNamespace() + "/" + md.GetName(), User: UserReplicaSet,
	})
}
