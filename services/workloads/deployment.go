package workloads

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Deployment condition reasons, as kube's deployment controller sets them.
const (
	reasonNewRSCreated     = "NewReplicaSetCreated"
	reasonFoundNewRS       = "FoundNewReplicaSet"
	reasonRSUpdated        = "ReplicaSetUpdated"
	reasonNewRSAvailable   = "NewReplicaSetAvailable"
	reasonTimedOut         = "ProgressDeadlineExceeded"
	reasonPaused           = "DeploymentPaused"
	reasonResumed          = "DeploymentResumed"
	reasonMinAvailable     = "MinimumReplicasAvailable"
	reasonMinUnavailable   = "MinimumReplicasUnavailable"
	eventScalingReplicaSet = "ScalingReplicaSet"
)

func (s *Service) getDeployment(ctx context.Context, ns, name string) (*dEntry, error) {
	d := &appsv1.Deployment{}
	t, rev, err := getObject(ctx, s.dKV, "deployment", ns, name, d)
	if err != nil {
		return nil, err
	}
	return &dEntry{obj: d, template: t, rev: rev}, nil
}

// deploymentRevision is the Deployment's revision in the bucket now (0: gone).
func (s *Service) deploymentRevision(ctx context.Context, ns, name string) (uint64, error) {
	_, rev, err := bus.GetEncoded(ctx, s.dKV, bus.ObjectKey(ns, name))
	if errors.Is(err, bus.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("deployment %s/%s: %w", ns, name, err)
	}
	return rev, nil
}

// dsync is one sync of a Deployment: what it read, and the ReplicaSets as it changes them.
type dsync struct {
	s     *Service
	d     *appsv1.Deployment
	dt    *pb.Pod
	drev  uint64
	newRS *rsEntry
	old   []*rsEntry
	// progressed: a ReplicaSet was created or scaled in this sync.
	created, progressed bool
	// fresh: the cache was read after a barrier (see syncDeployment); only then may pods be added.
	fresh bool
	// nsSeq is the last revision of the namespace's ReplicaSets this sync knows of (see addingWrite).
	nsSeq uint64
}

func revision(o metav1.Object) int64 {
	v, _ := strconv.ParseInt(o.GetAnnotations()[workload.AnnotationRevision], 10, 64)
	return v
}

// syncDeployment rolls a Deployment towards its template and writes its status. A first pass decides
// from the cache as it is; one that would add pods (create the new ReplicaSet with replicas, or scale
// one up) stops, waits until the cache holds every ReplicaSet written before, and decides again. A
// cache that had not yet seen a ReplicaSet (the one another replica, or this one, has just created)
// would otherwise not count its pods and scale the new one up beside them.
func (s *Service) syncDeployment(ctx context.Context, ns, name string) error {
	err := s.syncDeploymentFrom(ctx, ns, name, false)
	if !errors.Is(err, errStale) {
		return err
	}
	if err := s.replicaSetsBarrier(ctx); err != nil {
		return err
	}
	return s.syncDeploymentFrom(ctx, ns, name, true)
}

// replicaSetsBarrier waits until the cache has applied the replicasets bucket's latest revision.
func (s *Service) replicaSetsBarrier(ctx context.Context) error {
	last, err := bus.StoreRevision(ctx, s.rsKV)
	if err != nil {
		return err
	}
	return s.waitRS(ctx, last)
}

// waitRS waits until the cache has applied the replicasets bucket's revision last.
func (s *Service) waitRS(ctx context.Context, last uint64) error {
	deadline := time.Now().Add(s.cfg.barrierWait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for s.c.rsRevision() < last {
		if time.Now().After(deadline) {
			metrics.Count("workloads.barrier.timeout", 1)
			return errRequeue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func (s *Service) syncDeploymentFrom(ctx context.Context, ns, name string, fresh bool) error {
	de, err := s.getDeployment(ctx, ns, name)
	if errors.Is(err, bus.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	d := de.obj
	if d.DeletionTimestamp != nil {
		return nil // the garbage collector's
	}
	x := &dsync{s: s, d: d, dt: de.template, drev: de.rev, fresh: fresh}
	if err := x.classify(ctx); err != nil {
		return err
	}
	if d.Spec.Paused || x.scalingEvent() {
		// A paused Deployment is not rolled, but it is scaled; so is one whose replicas changed, before
		// its rollout goes on (kube's sync).
		if err := x.scaleProportionally(ctx); err != nil {
			return err
		}
	} else {
		if err := x.ensureNewRS(ctx); err != nil {
			return err
		}
		switch d.Spec.Strategy.Type {
		case appsv1.RecreateDeploymentStrategyType:
			err = x.recreate(ctx)
		default:
			err = x.rolling(ctx)
		}
		if err != nil {
			return err
		}
		if err := x.cleanup(ctx); err != nil {
			return err
		}
	}
	return x.writeStatus(ctx)
}

// classify finds the Deployment's ReplicaSets (adopting orphans its selector selects) and its new one.
func (x *dsync) classify(ctx context.Context) error {
	d := x.d
	rsets, nsSeq := x.s.c.replicaSetsOf(d.Namespace)
	x.nsSeq = nsSeq
	for _, r := range rsets {
		ours, orphan := belongs(d, r.obj)
		switch {
		case ours:
		case orphan:
			rs := r.obj.DeepCopy()
			t := true
			rs.OwnerReferences = append(rs.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment",
				Name: d.Name, UID: d.UID, Controller: &t, BlockOwnerDeletion: &t})
			rev, err := x.s.writeRS(ctx, rs, r.template, r.rev)
			if err != nil {
				return err
			}
			r = &rsEntry{obj: rs, template: r.template, rev: rev}
		default:
			continue
		}
		if x.newRS == nil && workload.EqualIgnoreHash(&r.obj.Spec.Template, &d.Spec.Template) {
			x.newRS = r
			continue
		}
		x.old = append(x.old, r)
	}
	slices.SortFunc(x.old, func(a, b *rsEntry) int { return a.obj.CreationTimestamp.Compare(b.obj.CreationTimestamp.Time) })
	return nil
}

// belongs says whether rs is d's ReplicaSet (ours) or an orphan d adopts.
func belongs(d *appsv1.Deployment, rs *appsv1.ReplicaSet) (ours, orphan bool) {
	ref := metav1.GetControllerOfNoCopy(rs)
	if ref != nil {
		return ref.UID == d.UID, false
	}
	return false, rs.DeletionTimestamp == nil && selects(d.Spec.Selector, rs.Labels)
}

// addingWrite stores data under key (a ReplicaSet of the Deployment: a new one, or one scaled up) only
// while the Deployment's ReplicaSets are those this sync counted. A decision that adds pods rests on
// all of them, and a compare-and-set of the one it writes cannot vouch for the others: another replica
// may scale another one up meanwhile, and a write held on a cut route may arrive seconds later, after
// the other replicas have moved on. So the write is conditional on the last revision of every
// ReplicaSet key of the namespace (one message, nats-server's check over a subject filter). When
// another key of the namespace was written after nsSeq, the cache catches up to it and the write is
// sent again over it if none of the Deployment's ReplicaSets (or orphans it adopts) changed.
func (x *dsync) addingWrite(ctx context.Context, key string, data []byte) (uint64, error) {
	ns := x.d.Namespace
	start := time.Now()
	for try := 1; ; try++ {
		rev, err := bus.WriteUnder(ctx, x.s.conn.JS, x.s.rsKV, key, data, false, bus.PodKeyPrefix(ns), x.nsSeq)
		if err == nil {
			x.nsSeq = rev
			return rev, nil
		}
		var ce *bus.ConflictError
		if !errors.As(err, &ce) || try == addingTries {
			return 0, err
		}
		metrics.Count("workloads.adding.moved", 1)
		if err := x.s.waitRS(ctx, ce.Rev); err != nil {
			return 0, err
		}
		now := x.s.c.revisionsOf(ns, func(rs *appsv1.ReplicaSet) bool {
			ours, orphan := belongs(x.d, rs)
			return ours || orphan
		})
		counted := x.counted()
		if !maps.Equal(now, counted) {
			// The ReplicaSet written moved too (another replica wrote the same decision first): its
			// own compare-and-set would have been refused as well. Otherwise this is what the filter
			// adds, a decision that another ReplicaSet of the Deployment moved under: said, so that
			// a run's logs show when it happened.
			_, name, _ := bus.SplitPodKey(key)
			if now[name] == counted[name] {
				x.s.log.Info("a write that adds pods was refused: another ReplicaSet of the Deployment changed after it counted them",
					"deployment", ns+"/"+x.d.Name, "key", key, "after", time.Since(start).Round(time.Millisecond))
				metrics.Count("workloads.adding.refused", 1)
			}
			return 0, errRequeue
		}
		x.nsSeq = ce.Rev
	}
}

// counted are the revisions of the Deployment's ReplicaSets this sync decides from, by name: those it
// read, as it has written them since.
func (x *dsync) counted() map[string]uint64 {
	out := map[string]uint64{}
	for _, r := range append([]*rsEntry{x.newRS}, x.old...) {
		if r != nil {
			out[r.obj.Name] = r.rev
		}
	}
	return out
}

// addingTries bounds the sends of one addingWrite while other ReplicaSets of the namespace change.
const addingTries = 4

func (x *dsync) maxOldRevision() int64 {
	var m int64
	for _, r := range x.old {
		m = max(m, revision(r.obj))
	}
	return m
}

func replicas(r *rsEntry) int32 {
	if r == nil {
		return 0
	}
	return ptrOr(r.obj.Spec.Replicas, 1)
}

// total is the pods the Deployment's ReplicaSets may have: each one's replicas, or the pods it still
// has while their deletion is on its way plus those it claimed to create (kube counts replicas alone,
// so its pods may exceed maxSurge for a moment; counting all keeps them within it).
func (x *dsync) total() int32 {
	var n int32
	for _, r := range append([]*rsEntry{x.newRS}, x.old...) {
		if r != nil {
			n += mayHave(r)
		}
	}
	return n
}

// mayHave is the most pods r can have: its replicas, or the pods its status counted plus the creations
// claimed with that status. A replica that claimed creations (replacements of deleted pods) at a higher
// replicas still sends them after the Deployment lowers it; the ReplicaSet deletes the extra ones only
// once it sees them, so until then they count.
func mayHave(r *rsEntry) int32 {
	return max(replicas(r), r.obj.Status.Replicas+int32(len(readClaims(r.obj).Create)))
}

// fenceposts are maxSurge and maxUnavailable in pods, as kube's ResolveFenceposts.
func fenceposts(d *appsv1.Deployment) (surge, unavailable int32) {
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return 0, 0
	}
	want := int(ptrOr(d.Spec.Replicas, 1))
	// The API defaults both; a record written otherwise gets the same defaults.
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil {
		ru = &appsv1.RollingUpdateDeployment{}
	}
	quarter := intstr.FromString("25%")
	s, _ := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ru.MaxSurge, quarter), want, true)
	u, _ := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(ru.MaxUnavailable, quarter), want, false)
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u)
}

// ensureNewRS creates the ReplicaSet of the Deployment's template, or brings an existing one's revision
// above the old ones' (a rollback to it).
func (x *dsync) ensureNewRS(ctx context.Context) error {
	d := x.d
	rev := x.maxOldRevision() + 1
	if x.newRS != nil {
		if revision(x.newRS.obj) >= rev {
			return nil
		}
		// A ReplicaSet that another replica made for a later template looks like a rollback to a sync
		// that read the Deployment before that template: roll back only while the Deployment is still
		// the one this sync read.
		if cur, err := x.s.deploymentRevision(ctx, d.Namespace, d.Name); err != nil {
			return err
		} else if cur != x.drev {
			return errRequeue
		}
		rs := x.newRS.obj.DeepCopy()
		old := rs.Annotations[workload.AnnotationRevision]
		setAnnotation(&rs.ObjectMeta, workload.AnnotationRevision, strconv.FormatInt(rev, 10))
		if old != "" {
			hist := rs.Annotations[workload.AnnotationRevisionHist]
			if hist != "" {
				hist += ","
			}
			setAnnotation(&rs.ObjectMeta, workload.AnnotationRevisionHist, hist+old)
		}
		if cc := d.Annotations[workload.AnnotationChangeCause]; cc != "" {
			setAnnotation(&rs.ObjectMeta, workload.AnnotationChangeCause, cc)
		}
		return x.writeRS(ctx, x.newRS, rs)
	}
	hash := workload.TemplateHash(&d.Spec.Template, d.Status.CollisionCount)
	template := *d.Spec.Template.DeepCopy()
	if template.Labels == nil {
		template.Labels = map[string]string{}
	}
	template.Labels[workload.LabelPodTemplateHash] = hash
	sel := d.Spec.Selector.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[workload.LabelPodTemplateHash] = hash
	t := true
	surge, _ := fenceposts(d)
	want := ptrOr(d.Spec.Replicas, 1)
	var n int32
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		n = max(0, min(want+surge-x.total(), want))
	}
	if n > 0 && !x.fresh {
		return errStale
	}
	rs := &appsv1.ReplicaSet{
		TypeMeta: metav1.TypeMeta{Kind: "ReplicaSet", APIVersion: "apps/v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: d.Name + "-" + hash, Namespace: d.Namespace, UID: types.UID(uuid.NewString()), Labels: maps.Clone(template.Labels),
			Annotations:       rsAnnotations(d, rev),
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: &t, BlockOwnerDeletion: &t}},
			CreationTimestamp: metav1.NewTime(x.s.cfg.now().Truncate(time.Second)),
			Generation:        1,
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: &n, MinReadySeconds: d.Spec.MinReadySeconds, Selector: sel, Template: template},
	}
	pt := proto.Clone(x.dt).(*pb.Pod)
	if pt.Metadata == nil {
		pt.Metadata = &pb.ObjectMeta{}
	}
	if pt.Metadata.Labels == nil {
		pt.Metadata.Labels = map[string]string{}
	}
	pt.Metadata.Labels[workload.LabelPodTemplateHash] = hash
	data, err := workload.Encode(rs, pt)
	if err != nil {
		return err
	}
	key := bus.ObjectKey(rs.Namespace, rs.Name)
	var rev2 uint64
	if n > 0 {
		// The name is free in what this sync counted; the write stands only while that is so.
		rev2, err = x.addingWrite(ctx, key, data)
	} else {
		rev2, err = bus.CreateEncoded(ctx, x.s.rsKV, key, data)
	}
	if errors.Is(err, bus.ErrExists) || errors.Is(err, bus.ErrConflict) {
		return errRequeue // another replica made it (or a collision): the next sync finds it
	}
	if err != nil {
		return fmt.Errorf("create replicaset %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	x.newRS = &rsEntry{obj: rs, template: pt, rev: rev2}
	x.created, x.progressed = true, true
	if n > 0 {
		x.event(rs.Name, 0, n)
	}
	return nil
}

// rsAnnotations are a new ReplicaSet's: the Deployment's own (as kube copies them) and its revision.
func rsAnnotations(d *appsv1.Deployment, rev int64) map[string]string {
	out := map[string]string{}
	for k, v := range d.Annotations {
		switch k {
		case workload.AnnotationRevision, workload.AnnotationRevisionHist, workload.AnnotationDesired,
			workload.AnnotationMaxReplicas, workload.AnnotationLastApplied:
			continue
		}
		out[k] = v
	}
	surge, _ := fenceposts(d)
	want := ptrOr(d.Spec.Replicas, 1)
	out[workload.AnnotationRevision] = strconv.FormatInt(rev, 10)
	out[workload.AnnotationDesired] = strconv.Itoa(int(want))
	out[workload.AnnotationMaxReplicas] = strconv.Itoa(int(want + surge))
	return out
}

// writeRS writes a changed ReplicaSet over the revision its entry was read at; one that adds pods
// (more replicas) through addingWrite.
func (x *dsync) writeRS(ctx context.Context, e *rsEntry, rs *appsv1.ReplicaSet) error {
	var rev uint64
	var err error
	if ptrOr(rs.Spec.Replicas, 1) > replicas(e) {
		var data []byte
		if data, err = workload.Encode(rs, e.template); err != nil {
			return err
		}
		rev, err = x.addingWrite(ctx, bus.ObjectKey(rs.Namespace, rs.Name), data)
	} else {
		rev, err = x.s.writeRS(ctx, rs, e.template, e.rev)
	}
	if err != nil {
		return err
	}
	// e may be the cache's entry, which the watch reads as it replaces it.
	x.s.c.mu.Lock()
	e.obj, e.rev = rs, rev
	x.s.c.mu.Unlock()
	return nil
}

// scale sets a ReplicaSet's replicas, compare-and-set on the revision the decision read.
func (x *dsync) scale(ctx context.Context, e *rsEntry, n int32) error {
	from := replicas(e)
	surge, _ := fenceposts(x.d)
	want := ptrOr(x.d.Spec.Replicas, 1)
	desired, maxReplicas := strconv.Itoa(int(want)), strconv.Itoa(int(want+surge))
	if from == n && (n == 0 || e.obj.Annotations[workload.AnnotationDesired] == desired && e.obj.Annotations[workload.AnnotationMaxReplicas] == maxReplicas) {
		return nil
	}
	// A decision that scales up rests on every ReplicaSet of the Deployment as read; a newer Deployment
	// (another template) may have made another ReplicaSet the new one.
	if n > from {
		if !x.fresh {
			return errStale
		}
		cur, err := x.s.getDeployment(ctx, x.d.Namespace, x.d.Name)
		if err != nil {
			return err
		}
		if cur.rev != x.drev {
			return errRequeue
		}
	}
	rs := e.obj.DeepCopy()
	setAnnotation(&rs.ObjectMeta, workload.AnnotationDesired, desired)
	setAnnotation(&rs.ObjectMeta, workload.AnnotationMaxReplicas, maxReplicas)
	if from == n {
		return x.writeRS(ctx, e, rs) // sized for the Deployment's replicas as they are now
	}
	rs.Spec.Replicas = &n
	rs.Generation++
	if err := x.writeRS(ctx, e, rs); err != nil {
		return err
	}
	x.progressed = true
	x.event(rs.Name, from, n)
	return nil
}

func (x *dsync) event(rs string, from, to int32) {
	verb := "up"
	if to < from {
		verb = "down"
	}
	ref := &pb.ObjectReference{Kind: "Deployment", ApiVersion: "apps/v1", Namespace: x.d.Namespace, Name: x.d.Name, Uid: string(x.d.UID)}
	msg := fmt.Sprintf("Scaled %s replica set %s from %d to %d", verb, rs, from, to)
	if _, err := x.s.dEv.Event(ref, "Normal", eventScalingReplicaSet, msg, fmt.Sprintf("%s/%d/%d/%d", rs, from, to, x.drev), time.Time{}); err != nil {
		x.s.log.Debug("event", "err", err)
	}
}

// rolling is kube's rolloutRolling: scale the new ReplicaSet up within maxSurge, then the old ones down
// within maxUnavailable.
func (x *dsync) rolling(ctx context.Context) error {
	d := x.d
	want := ptrOr(d.Spec.Replicas, 1)
	surge, unavailable := fenceposts(d)
	nr := replicas(x.newRS)
	switch {
	case nr > want:
		return x.scale(ctx, x.newRS, want)
	case nr < want:
		if total := x.total(); total < want+surge {
			if err := x.scale(ctx, x.newRS, nr+min(want+surge-total, want-nr)); err != nil {
				return err
			}
			return nil // the old ones are scaled down on the next sync, from what this one changed
		}
	}
	var oldCount int32
	for _, r := range x.old {
		oldCount += replicas(r)
	}
	if oldCount == 0 {
		return nil
	}
	minAvailable := want - unavailable
	newUnavailable := replicas(x.newRS) - x.newRS.obj.Status.AvailableReplicas
	maxScaledDown := x.total() - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return nil
	}
	// Old pods that are not available go first: they count for nothing.
	var cleaned int32
	for _, r := range x.old {
		if cleaned >= maxScaledDown {
			break
		}
		n := replicas(r)
		unhealthy := n - r.obj.Status.AvailableReplicas
		if n == 0 || unhealthy <= 0 {
			continue
		}
		down := min(maxScaledDown-cleaned, unhealthy)
		if err := x.scale(ctx, r, n-down); err != nil {
			return err
		}
		cleaned += down
	}
	available := x.newRS.obj.Status.AvailableReplicas
	for _, r := range x.old {
		available += min(r.obj.Status.AvailableReplicas, replicas(r))
	}
	budget := available - minAvailable
	for _, r := range x.old {
		if budget <= 0 {
			break
		}
		n := replicas(r)
		if n == 0 {
			continue
		}
		down := min(n, budget)
		if err := x.scale(ctx, r, n-down); err != nil {
			return err
		}
		budget -= down
	}
	return nil
}

// recreate scales every old ReplicaSet to 0, waits for their pods to be gone, then scales the new one.
func (x *dsync) recreate(ctx context.Context) error {
	for _, r := range x.old {
		if err := x.scale(ctx, r, 0); err != nil {
			return err
		}
	}
	for _, r := range x.old {
		pods, _ := x.s.c.podsFor(x.d.Namespace, string(r.obj.UID), false)
		for _, pe := range pods {
			if !isTerminalPB(pe.pod) {
				return nil // the old pods are still going; their changes sync again
			}
		}
	}
	return x.scale(ctx, x.newRS, ptrOr(x.d.Spec.Replicas, 1))
}

func isTerminalPB(p *pb.Pod) bool {
	ph := p.GetStatus().GetPhase()
	return ph == "Succeeded" || ph == "Failed"
}

// cleanup deletes the oldest old ReplicaSets that hold no pods beyond revisionHistoryLimit.
func (x *dsync) cleanup(ctx context.Context) error {
	limit := x.d.Spec.RevisionHistoryLimit
	if limit == nil {
		return nil
	}
	var idle []*rsEntry
	for _, r := range x.old {
		if replicas(r) == 0 && r.obj.Status.Replicas == 0 && r.obj.Status.ObservedGeneration >= r.obj.Generation && r.obj.DeletionTimestamp == nil {
			idle = append(idle, r)
		}
	}
	if len(idle) <= int(*limit) {
		return nil
	}
	slices.SortFunc(idle, func(a, b *rsEntry) int { return int(revision(a.obj) - revision(b.obj)) })
	for _, r := range idle[:len(idle)-int(*limit)] {
		err := bus.Delete(ctx, x.s.rsKV, bus.ObjectKey(r.obj.Namespace, r.obj.Name), r.rev)
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return err
		}
		metrics.Count("workloads.rs.cleaned", 1)
	}
	return nil
}

// writeStatus writes the Deployment's revision annotation, status and conditions, compare-and-set on
// the revision this sync read.
func (x *dsync) writeStatus(ctx context.Context) error {
	d := x.d
	now := metav1.NewTime(x.s.cfg.now().Truncate(time.Second))
	want := ptrOr(d.Spec.Replicas, 1)
	st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, CollisionCount: d.Status.CollisionCount,
		Conditions: slices.Clone(d.Status.Conditions)}
	all := x.old
	if x.newRS != nil {
		all = append(slices.Clone(x.old), x.newRS)
		st.UpdatedReplicas = x.newRS.obj.Status.Replicas
	}
	for _, r := range all {
		st.Replicas += r.obj.Status.Replicas
		st.ReadyReplicas += r.obj.Status.ReadyReplicas
		st.AvailableReplicas += r.obj.Status.AvailableReplicas
	}
	st.UnavailableReplicas = max(0, want-st.AvailableReplicas)
	_, unavailable := fenceposts(d)
	if st.AvailableReplicas >= want-unavailable {
		setCondition(&st, appsv1.DeploymentAvailable, corev1.ConditionTrue, reasonMinAvailable, "Deployment has minimum availability.", now, false)
	} else {
		setCondition(&st, appsv1.DeploymentAvailable, corev1.ConditionFalse, reasonMinUnavailable, "Deployment does not have minimum availability.", now, false)
	}
	x.progress(&st, now)
	next := d.DeepCopy()
	next.Status = st
	if x.newRS != nil {
		setAnnotation(&next.ObjectMeta, workload.AnnotationRevision, x.newRS.obj.Annotations[workload.AnnotationRevision])
	}
	if equality.Semantic.DeepEqual(next, d) {
		return nil
	}
	data, err := workload.Encode(next, x.dt)
	if err != nil {
		return err
	}
	_, err = bus.UpdateEncoded(ctx, x.s.dKV, bus.ObjectKey(d.Namespace, d.Name), data, x.drev)
	return err
}

// progress sets the Progressing condition as kube's syncRolloutStatus does.
func (x *dsync) progress(st *appsv1.DeploymentStatus, now metav1.Time) {
	d := x.d
	cur := condition(d.Status.Conditions, appsv1.DeploymentProgressing)
	if d.Spec.Paused {
		if cur == nil || cur.Reason != reasonPaused {
			setCondition(st, appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonPaused, "Deployment is paused", now, true)
		}
		return
	}
	if cur != nil && cur.Reason == reasonPaused {
		setCondition(st, appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonResumed, "Deployment is resumed", now, true)
		return
	}
	if x.newRS == nil {
		return
	}
	name := x.newRS.obj.Name
	want := ptrOr(d.Spec.Replicas, 1)
	complete := st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want && st.ObservedGeneration >= d.Generation
	changed := st.UpdatedReplicas != d.Status.UpdatedReplicas || st.Replicas != d.Status.Replicas ||
		st.ReadyReplicas != d.Status.ReadyReplicas || st.AvailableReplicas != d.Status.AvailableReplicas
	switch {
	case complete:
		if cur == nil || cur.Reason != reasonNewRSAvailable {
			setCondition(st, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable,
				fmt.Sprintf("ReplicaSet %q has successfully progressed.", name), now, true)
		}
	case x.created:
		setCondition(st, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSCreated,
			fmt.Sprintf("Created new replica set %q", name), now, true)
	case cur == nil:
		setCondition(st, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonFoundNewRS,
			fmt.Sprintf("Found new replica set %q", name), now, true)
	case x.progressed || changed || cur.Reason == reasonNewRSAvailable:
		setCondition(st, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonRSUpdated,
			fmt.Sprintf("ReplicaSet %q is progressing.", name), now, true)
	case d.Spec.ProgressDeadlineSeconds != nil && cur.Reason != reasonTimedOut &&
		cur.LastUpdateTime.Add(time.Duration(*d.Spec.ProgressDeadlineSeconds)*time.Second).Before(now.Time):
		setCondition(st, appsv1.DeploymentProgressing, corev1.ConditionFalse, reasonTimedOut,
			fmt.Sprintf("ReplicaSet %q has timed out progressing.", name), now, true)
	}
}

func condition(cs []appsv1.DeploymentCondition, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// setCondition sets a condition; lastTransitionTime moves with its status, lastUpdateTime with any
// change (or always, when touch: progress made).
func setCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason, msg string, now metav1.Time, touch bool) {
	c := condition(st.Conditions, t)
	if c == nil {
		st.Conditions = append(st.Conditions, appsv1.DeploymentCondition{Type: t, Status: status, Reason: reason, Message: msg,
			LastUpdateTime: now, LastTransitionTime: now})
		return
	}
	if c.Status == status && c.Reason == reason && c.Message == msg && !touch {
		return
	}
	if c.Status != status {
		c.LastTransitionTime = now
	}
	c.Status, c.Reason, c.Message, c.LastUpdateTime = status, reason, msg, now
}
