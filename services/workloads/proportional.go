package workloads

import (
	"context"
	"math"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/podbus/podbus/internal/workload"
)

// A Deployment whose replicas change while more than one of its ReplicaSets has pods (a rollout under
// way, or paused) is scaled as kube's deployment controller scales it: every such ReplicaSet takes a
// share of the change in proportion to its size, so the rollout goes on from the same point at the
// new size. Each ReplicaSet records the Deployment's replicas it was last sized for
// (deployment.kubernetes.io/desired-replicas); one that differs from the Deployment's is a scaling event.

// scalingEvent reports a ReplicaSet with pods sized for other replicas than the Deployment's.
func (x *dsync) scalingEvent() bool {
	want := ptrOr(x.d.Spec.Replicas, 1)
	for _, r := range x.active() {
		v, ok := r.obj.Annotations[workload.AnnotationDesired]
		if n, err := strconv.Atoi(v); ok && err == nil && int32(n) != want {
			return true
		}
	}
	return false
}

// active are the ReplicaSets with replicas, the new one first.
func (x *dsync) active() []*rsEntry {
	var out []*rsEntry
	for _, r := range append([]*rsEntry{x.newRS}, x.old...) {
		if r != nil && replicas(r) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// scaleProportionally is kube's scale: one ReplicaSet with replicas (or none, then the newest) takes
// the Deployment's count; a saturated new one leaves the old ones none; otherwise, for a rolling
// update, the difference to replicas + maxSurge is shared out by size. Additions stay within what the
// ReplicaSets' pods (see total) leave under replicas + maxSurge.
func (x *dsync) scaleProportionally(ctx context.Context) error {
	want := ptrOr(x.d.Spec.Replicas, 1)
	active := x.active()
	switch {
	case len(active) == 1:
		return x.scale(ctx, active[0], want)
	case len(active) == 0:
		if latest := x.latest(); latest != nil {
			return x.scale(ctx, latest, want)
		}
		return nil
	case x.newRS != nil && x.saturated():
		for _, r := range x.old {
			if err := x.scale(ctx, r, 0); err != nil {
				return err
			}
		}
		return nil
	case x.d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType:
		return nil
	}
	surge, _ := fenceposts(x.d)
	var allowed int32
	if want > 0 {
		allowed = want + surge
	}
	var sum int32
	for _, r := range active {
		sum += replicas(r)
	}
	toAdd := allowed - sum
	if toAdd > 0 {
		if toAdd = min(toAdd, allowed-x.total()); toAdd <= 0 {
			return nil // pods on their way out still count; their going syncs again
		}
	}
	if toAdd == 0 {
		return x.annotateAll(ctx, active)
	}
	if toAdd < 0 && sum+toAdd < 0 {
		toAdd = -sum
	}
	// Additions go to the largest (then newest) first, removals come from the largest (then oldest).
	slices.SortStableFunc(active, func(a, b *rsEntry) int {
		if c := int(replicas(b)) - int(replicas(a)); c != 0 {
			return c
		}
		c := a.obj.CreationTimestamp.Compare(b.obj.CreationTimestamp.Time)
		if toAdd > 0 {
			return -c
		}
		return c
	})
	sizes := make([]int32, len(active))
	var added int32
	for i, r := range active {
		p := x.proportion(r, toAdd, added)
		sizes[i] = replicas(r) + p
		added += p
	}
	sizes[0] = max(0, sizes[0]+toAdd-added)
	// Removals before additions, so the pods never pass replicas + maxSurge in between.
	order := make([]int, len(active))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return int(sizes[a]-replicas(active[a])) - int(sizes[b]-replicas(active[b]))
	})
	for _, i := range order {
		if err := x.scale(ctx, active[i], sizes[i]); err != nil {
			return err
		}
	}
	return nil
}

// annotateAll records the Deployment's replicas on ReplicaSets whose share did not change.
func (x *dsync) annotateAll(ctx context.Context, rs []*rsEntry) error {
	for _, r := range rs {
		if err := x.scale(ctx, r, replicas(r)); err != nil {
			return err
		}
	}
	return nil
}

// proportion is kube's GetProportion: r's share of toAdd, of which added is given out already.
func (x *dsync) proportion(r *rsEntry, toAdd, added int32) int32 {
	if replicas(r) == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	f := x.fraction(r)
	left := toAdd - added
	if toAdd > 0 {
		return min(f, left)
	}
	return max(f, left)
}

// fraction is kube's getReplicaSetFraction: how r's replicas change when the Deployment's
// replicas + maxSurge goes from what r was sized for (its max-replicas annotation) to the current.
func (x *dsync) fraction(r *rsEntry) int32 {
	want := ptrOr(x.d.Spec.Replicas, 1)
	if want == 0 {
		return -replicas(r)
	}
	surge, _ := fenceposts(x.d)
	before := x.d.Status.Replicas
	if v, err := strconv.Atoi(r.obj.Annotations[workload.AnnotationMaxReplicas]); err == nil {
		before = int32(v)
	}
	if before == 0 {
		return 0
	}
	size := float64(replicas(r)) * float64(want+surge) / float64(before)
	return int32(math.Round(size)) - replicas(r)
}

// saturated: the new ReplicaSet has every replica, sized for this count, all available.
func (x *dsync) saturated() bool {
	want := ptrOr(x.d.Spec.Replicas, 1)
	r := x.newRS
	return replicas(r) == want && r.obj.Annotations[workload.AnnotationDesired] == strconv.Itoa(int(want)) &&
		r.obj.Status.AvailableReplicas == want
}

// latest is the newest ReplicaSet: the new one, or else the most recently created old one.
func (x *dsync) latest() *rsEntry {
	if x.newRS != nil {
		return x.newRS
	}
	var out *rsEntry
	for _, r := range x.old {
		if out == nil || out.obj.CreationTimestamp.Before(&r.obj.CreationTimestamp) {
			out = r
		}
	}
	return out
}
