package check

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Deployment violation kinds.
const (
	// KindSurge: at some pods-bucket revision a Deployment's pods (those of all its ReplicaSets, neither
	// terminating nor terminal) exceed replicas + maxSurge.
	KindSurge = "surge"
	// KindRollout: at the end, a Deployment without exactly spec.replicas Ready pods of its current
	// template, or with pods of older ReplicaSets left.
	KindRollout = "rollout"
	// KindOrphan: at the end, a pod or ReplicaSet of a deleted Deployment left behind.
	KindOrphan = "orphan"
)

// claimHold is how long after a scale-down pods decided before it may still appear: a ReplicaSet's
// claim on pods to create lasts 20 s (docs/design.md, "Workload controllers"), plus sourceLag.
const claimHold = 20*time.Second + sourceLag

// sourceLag is how much later than a pod record a Deployment's change may reach the audit log: AUDIT
// merges the pods and the deployments buckets' streams, each sourced on its own, so a scale-up can be
// copied after the pods it made room for.
const sourceLag = 5 * time.Second

// deployVersion is one record of a Deployment.
type deployVersion struct {
	seq  uint64
	time time.Time // written by (see Origins.writtenBy)
	// after: written after this, by the origin's samples (see Origins.writtenAfter); afterKnown false
	// when they cannot tell.
	after      time.Time
	afterKnown bool
	bound      int    // replicas + maxSurge
	revision   string // deployment.kubernetes.io/revision
	// gap: spec versions before this one are missing from the log (its generation is more than one
	// above the last one seen): AUDIT copied the bucket too late to see them, its key history being
	// one. What they allowed is unknown.
	gap bool
}

// deployEvent is a change in the number of a Deployment's active pods; added when a pod became one.
type deployEvent struct {
	seq   uint64
	time  time.Time
	count int
	added bool
	pod   string
	uid   string
	rs    string
	rev   uint64
	perRS string // the active pods of each ReplicaSet then, for the report
	// version is the index in versions of the Deployment record in force (-1: none seen yet).
	version int
}

// deployHist is one Deployment (by namespace/name) over the history.
type deployHist struct {
	key      string
	versions []deployVersion
	events   []deployEvent
	last     *appsv1.Deployment // nil once deleted
	gone     bool               // deleted, or marked for deletion
	active   int
	perRS    map[string]int // active pods by ReplicaSet name
}

// podOwner is what a stored pod counts on: the Deployment whose ReplicaSet controls it.
type podOwner struct {
	deploy string // namespace/name, "" for none
	rs     string // the ReplicaSet's name
	hash   string // pod-template-hash
	active bool
}

// deployments is the Deployments part of the history.
type deployments struct {
	byKey map[string]*deployHist
	rsets map[string]*appsv1.ReplicaSet // live ReplicaSets by namespace/name
	rsRev map[string]uint64
	pods  map[string]podOwner // by pods-bucket key
	// origins time records by their origin streams (see Origins); nil: by AUDIT time.
	origins Origins
}

func newDeployments() *deployments {
	return &deployments{byKey: map[string]*deployHist{}, rsets: map[string]*appsv1.ReplicaSet{},
		rsRev: map[string]uint64{}, pods: map[string]podOwner{}}
}

func (d *deployments) hist(key string) *deployHist {
	dh := d.byKey[key]
	if dh == nil {
		dh = &deployHist{key: key, perRS: map[string]int{}}
		d.byKey[key] = dh
	}
	return dh
}

// surgeBound is replicas + maxSurge, resolved as kube's deployment controller does (a percentage of
// replicas rounded up; Recreate surges by none).
func surgeBound(dep *appsv1.Deployment) int {
	replicas := 1
	if dep.Spec.Replicas != nil {
		replicas = int(*dep.Spec.Replicas)
	}
	if dep.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return replicas
	}
	surge := intstr.FromString("25%")
	if ru := dep.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
		surge = *ru.MaxSurge
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&surge, replicas, true)
	if err != nil {
		return replicas
	}
	return replicas + n
}

func objectRef(key string) string {
	ns, name, _ := bus.SplitPodKey(key)
	return ns + "/" + name
}

func (d *deployments) applyDeployment(r *audit.Record, key string) {
	dh := d.hist(objectRef(key))
	if r.Deleted() {
		dh.last, dh.gone = nil, true
		return
	}
	dep := &appsv1.Deployment{}
	if _, err := workload.Decode(r.Data, dep); err != nil {
		return
	}
	if dh.gone && dh.last == nil {
		// A new Deployment of the same name: a new history.
		*dh = deployHist{key: dh.key, active: dh.active, perRS: dh.perRS}
	}
	var lastGen int64
	if dh.last != nil {
		lastGen = dh.last.Generation
	}
	dh.last = dep
	dh.gone = dep.DeletionTimestamp != nil
	after, known := d.origins.writtenAfter(r)
	dh.versions = append(dh.versions, deployVersion{seq: r.Seq, time: d.origins.writtenBy(r), after: after, afterKnown: known,
		bound: surgeBound(dep), revision: dep.Annotations[workload.AnnotationRevision], gap: dep.Generation > lastGen+1})
}

func (d *deployments) applyReplicaSet(r *audit.Record, key string, rev uint64) {
	ref := objectRef(key)
	if r.Deleted() {
		delete(d.rsets, ref)
		return
	}
	rs := &appsv1.ReplicaSet{}
	if _, err := workload.Decode(r.Data, rs); err != nil {
		return
	}
	d.rsets[ref], d.rsRev[ref] = rs, rev
}

// ownerOf is the Deployment a pod counts on: its controlling ReplicaSet's controlling Deployment. The
// ReplicaSet's record may reach the log after the pod's, so without it the Deployment is the
// ReplicaSet's name less "-<pod-template-hash>", as the deployment controller names it.
func (d *deployments) ownerOf(p *pb.Pod) podOwner {
	md := p.GetMetadata()
	var rsName string
	for _, o := range md.GetOwnerReferences() {
		if o.GetController() && o.GetKind() == "ReplicaSet" {
			rsName = o.GetName()
		}
	}
	if rsName == "" {
		return podOwner{}
	}
	ns := md.GetNamespace()
	hash := md.GetLabels()[workload.LabelPodTemplateHash]
	own := podOwner{rs: rsName, hash: hash}
	if rs := d.rsets[ns+"/"+rsName]; rs != nil {
		for _, o := range rs.OwnerReferences {
			if o.Controller != nil && *o.Controller && o.Kind == "Deployment" {
				own.deploy = ns + "/" + o.Name
			}
		}
		return own
	}
	if base, ok := strings.CutSuffix(rsName, "-"+hash); ok && hash != "" {
		own.deploy = ns + "/" + base
	}
	return own
}

// applyPod counts a pod's revision against its Deployment. p is nil when the key is deleted.
func (d *deployments) applyPod(r *audit.Record, key string, rev uint64, p *pb.Pod) {
	prev := d.pods[key]
	var cur podOwner
	if p != nil {
		cur = d.ownerOf(p)
		cur.active = cur.deploy != "" && p.GetMetadata().GetDeletionTimestamp() == nil && !podutil.IsTerminal(p)
		d.pods[key] = cur
	} else {
		delete(d.pods, key)
	}
	if prev.active == cur.active && prev.deploy == cur.deploy {
		return
	}
	if prev.active {
		dh := d.hist(prev.deploy)
		dh.active--
		dh.perRS[prev.rs]--
		dh.events = append(dh.events, deployEvent{seq: r.Seq, time: d.origins.writtenBy(r), count: dh.active, version: len(dh.versions) - 1})
	}
	if cur.active {
		dh := d.hist(cur.deploy)
		dh.active++
		dh.perRS[cur.rs]++
		ns, name, _ := bus.SplitPodKey(key)
		dh.events = append(dh.events, deployEvent{seq: r.Seq, time: d.origins.writtenBy(r), count: dh.active, added: true,
			pod: ns + "/" + name, uid: p.GetMetadata().GetUid(), rs: cur.rs, rev: rev, version: len(dh.versions) - 1, perRS: dh.rsCounts()})
	}
}

// surges judges every pod a Deployment gained against replicas + maxSurge. After a scale-down the
// older, larger bound holds until the pods come down to the new one and claimHold has passed, since
// ReplicaSets scaled before the change may still be creating theirs; a Deployment record copied to the
// log after a pod's counts from that pod on when it may have been written before it (lateBound).
func (d *deployments) surges() []Violation {
	var out []Violation
	for _, k := range slices.Sorted(maps.Keys(d.byKey)) {
		dh := d.byKey[k]
		allowance, applied := -1, -1
		var lowered time.Time // the last scale-down
		settle := func(ev deployEvent, bound int) {
			if ev.count <= bound && !ev.time.Before(lowered.Add(claimHold)) {
				allowance = bound
			}
		}
		for _, ev := range dh.events {
			for ; applied < ev.version; applied++ {
				v := dh.versions[applied+1]
				if v.bound < allowance || v.gap {
					lowered = v.time
				}
				allowance = max(allowance, v.bound)
				if v.gap {
					allowance = math.MaxInt // until the pods come down to a known bound
				}
			}
			if applied < 0 {
				continue // no record of the Deployment yet (a history begun mid-way): not judged
			}
			bound := dh.versions[applied].bound
			if !ev.added {
				settle(ev, bound)
				continue
			}
			if ev.count <= allowance || d.lateBound(dh, applied+1, ev) {
				settle(ev, bound)
				continue
			}
			out = append(out, Violation{Kind: KindSurge, Deployment: k, Pod: ev.pod, UID: ev.uid, Revision: ev.rev, Seq: ev.seq,
				Detail: fmt.Sprintf("%d pods of its ReplicaSets (this one of %s; %s) at Deployment revision %q, above replicas + maxSurge = %d%s",
					ev.count, ev.rs, ev.perRS, dh.versions[applied].revision, allowance, dh.nextVersion(applied+1, ev))})
		}
	}
	return out
}

// rsCounts lists the active pods by ReplicaSet.
func (dh *deployHist) rsCounts() string {
	var parts []string
	for rs, n := range dh.perRS {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", rs, n))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// lateBound: a Deployment record from versions[from:] that may have been written before ev's pod
// allows its count. A record copied to the log after the pod may still have been written before it:
// when its origin's samples show it not written yet only before the pod was, or, by AUDIT's times
// alone, when it was copied within sourceLag of the pod. Versions lost to the log (a gap) came after
// the one applied and before the next seen, so any of them may have been written before the pod and
// allowed its count: what they allowed is unknown, and the pod is not judged.
func (d *deployments) lateBound(dh *deployHist, from int, ev deployEvent) bool {
	for _, v := range dh.versions[from:] {
		if v.gap {
			return true
		}
		if !v.mayPrecede(ev) {
			return false // nor may the later ones: one origin stream keeps its order
		}
		if v.bound >= ev.count {
			return true
		}
	}
	return false
}

func (v deployVersion) mayPrecede(ev deployEvent) bool {
	return !v.time.After(ev.time.Add(sourceLag)) || (v.afterKnown && v.after.Before(ev.time))
}

// nextVersion describes, for a surge's report, the first Deployment record after versions[from-1]
// that would allow ev's count, and when it and the pod were written.
func (dh *deployHist) nextVersion(from int, ev deployEvent) string {
	for _, v := range dh.versions[from:] {
		if v.bound < ev.count {
			continue
		}
		after := "unknown"
		if v.afterKnown {
			after = v.after.UTC().Format(time.RFC3339Nano)
		}
		return fmt.Sprintf("; the first later Deployment record allowing it (log seq %d, replicas + maxSurge = %d) was written after %s and by %s, the pod by %s",
			v.seq, v.bound, after, v.time.UTC().Format(time.RFC3339Nano), ev.time.UTC().Format(time.RFC3339Nano))
	}
	return "; no later Deployment record allows it"
}

// endState checks each Deployment at the end: a live one has exactly spec.replicas pods, all Ready and
// of the ReplicaSet of its current template, and no pod of an older one (a finished RollingUpdate
// scales those to zero); a deleted one has left no ReplicaSet and no pod.
func (d *deployments) endState(h *history) []Violation {
	type tally struct {
		current, ready, old int
		oldRS               []string
		left                []string
	}
	var out []Violation
	newest := map[string]string{} // Deployment -> hash of the ReplicaSet of its current template
	rsOf := map[string][]string{} // Deployment -> its ReplicaSets left
	for _, k := range slices.Sorted(maps.Keys(d.rsets)) {
		rs := d.rsets[k]
		for _, o := range rs.OwnerReferences {
			if o.Controller == nil || !*o.Controller || o.Kind != "Deployment" {
				continue
			}
			ns, _, _ := strings.Cut(k, "/")
			dk := ns + "/" + o.Name
			rsOf[dk] = append(rsOf[dk], k)
			if dh := d.byKey[dk]; dh != nil && dh.last != nil && workload.EqualIgnoreHash(&dh.last.Spec.Template, &rs.Spec.Template) {
				newest[dk] = rs.Labels[workload.LabelPodTemplateHash]
			}
		}
	}
	tallies := map[string]*tally{}
	for _, k := range slices.Sorted(maps.Keys(d.pods)) {
		own := d.pods[k]
		if own.deploy == "" {
			continue
		}
		t := tallies[own.deploy]
		if t == nil {
			t = &tally{}
			tallies[own.deploy] = t
		}
		ns, name, _ := bus.SplitPodKey(k)
		t.left = append(t.left, ns+"/"+name)
		if !own.active {
			continue
		}
		if hash, ok := newest[own.deploy]; ok && own.hash == hash {
			t.current++
			if s := h.keys[k]; s != nil && podutil.PodCondition(h.uids[s.uid].last, podutil.PodReady).GetStatus() == podutil.True {
				t.ready++
			}
			continue
		}
		t.old++
		if !slices.Contains(t.oldRS, own.rs) {
			t.oldRS = append(t.oldRS, own.rs)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(d.byKey)) {
		dh := d.byKey[k]
		t := tallies[k]
		if t == nil {
			t = &tally{}
		}
		if dh.gone {
			if len(rsOf[k]) > 0 {
				out = append(out, Violation{Kind: KindOrphan, Deployment: k,
					Detail: "deleted, its ReplicaSets left: " + strings.Join(rsOf[k], ", ")})
			}
			if len(t.left) > 0 {
				out = append(out, Violation{Kind: KindOrphan, Deployment: k, Pod: t.left[0],
					Detail: fmt.Sprintf("deleted, %d pods left: %s", len(t.left), strings.Join(t.left, ", "))})
			}
			continue
		}
		if dh.last == nil {
			continue // pods of a Deployment the history never showed
		}
		replicas := 1
		if dh.last.Spec.Replicas != nil {
			replicas = int(*dh.last.Spec.Replicas)
		}
		revision := dh.last.Annotations[workload.AnnotationRevision]
		v := Violation{Kind: KindRollout, Deployment: k, Seq: dh.versions[len(dh.versions)-1].seq}
		hash, ok := newest[k]
		switch {
		case dh.last.Spec.Paused:
			continue
		case !ok:
			v.Detail = fmt.Sprintf("revision %q: no ReplicaSet of its current template", revision)
		case t.current != replicas || t.ready != replicas:
			v.Detail = fmt.Sprintf("revision %q: %d pods of its current template (pod-template-hash %s), %d Ready, want %d",
				revision, t.current, hash, t.ready, replicas)
		case t.old > 0:
			v.Detail = fmt.Sprintf("revision %q: %d pods of older ReplicaSets left (%s)", revision, t.old, strings.Join(t.oldRS, ", "))
		default:
			continue
		}
		out = append(out, v)
	}
	return out
}
