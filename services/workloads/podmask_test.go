package workloads

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// maskPods are pods that differ in every field the controllers read, each from a running pod of
// maskRS.
func maskPods(t *testing.T, now time.Time) []*pb.Pod {
	t.Helper()
	ts := timestamppb.New
	change := map[string]func(p *pb.Pod){
		"running ready": func(*pb.Pod) {},
		"ready lately": func(p *pb.Pod) {
			podCondition(p, "Ready").LastTransitionTime = ts(now.Add(-10 * time.Second))
		},
		"ready, no transition time": func(p *pb.Pod) { podCondition(p, "Ready").LastTransitionTime = nil },
		"not ready":                 func(p *pb.Pod) { podCondition(p, "Ready").Status = "False" },
		"no conditions":             func(p *pb.Pod) { p.Status.Conditions = nil },
		"first Ready counts": func(p *pb.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, &pb.PodCondition{Type: "Ready", Status: "False"})
			slices.Reverse(p.Status.Conditions)
		},
		"unscheduled": func(p *pb.Pod) {
			p.Spec.NodeName = ""
			p.Metadata.CreationTimestamp = ts(now.Add(-2 * time.Hour)) // older than "pending on a node"
			p.Status = &pb.PodStatus{Phase: "Pending", Conditions: []*pb.PodCondition{{Type: "PodScheduled", Status: "False"}}}
		},
		"pending on a node": func(p *pb.Pod) { p.Status.Phase = "Pending"; podCondition(p, "Ready").Status = "False" },
		"unknown":           func(p *pb.Pod) { p.Status.Phase = "Unknown" },
		"succeeded":         func(p *pb.Pod) { p.Status.Phase = "Succeeded" },
		"failed":            func(p *pb.Pod) { p.Status.Phase = "Failed" },
		"deleting":          func(p *pb.Pod) { p.Metadata.DeletionTimestamp = ts(now.Add(-time.Second)) },
		"restarted": func(p *pb.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 3
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, &pb.ContainerStatus{Name: "side", RestartCount: 4})
			p.Status.InitContainerStatuses = []*pb.ContainerStatus{{Name: "init", RestartCount: 9}}
		},
		"orphan": func(p *pb.Pod) { p.Metadata.OwnerReferences = nil },
		"orphan elsewhere": func(p *pb.Pod) {
			p.Metadata.OwnerReferences = nil
			p.Metadata.Labels = map[string]string{"app": "other"}
		},
		"another controller": func(p *pb.Pod) {
			p.Metadata.OwnerReferences = []*pb.OwnerReference{ownerRef("apps/v1", "ReplicaSet", "other", "uid-other")}
		},
		"not a controller": func(p *pb.Pod) {
			p.Metadata.OwnerReferences[0].Controller = proto.Bool(false)
		},
		"controlled by a Job": func(p *pb.Pod) {
			p.Metadata.OwnerReferences = []*pb.OwnerReference{ownerRef("batch/v1", "Job", "j", "uid-job")}
		},
		"released": func(p *pb.Pod) { p.Metadata.Labels = map[string]string{"app": "other"} },
		"partly labeled": func(p *pb.Pod) {
			delete(p.Metadata.Labels, "loadtest")
		},
		"older": func(p *pb.Pod) { p.Metadata.CreationTimestamp = ts(now.Add(-time.Hour)) },
	}
	var out []*pb.Pod
	for i, name := range slices.Sorted(maps.Keys(change)) {
		p := runningPod(t, i)
		p.Metadata.Name = name
		change[name](p)
		out = append(out, p)
	}
	return out
}

func podCondition(p *pb.Pod, t string) *pb.PodCondition {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == t {
			return c
		}
	}
	panic("no condition " + t)
}

// maskRS is the ReplicaSet of runningPod(0..99).
func maskRS() *appsv1.ReplicaSet {
	labels := map[string]string{"app": "lt-0", "loadtest": "deployments", "pod-template-hash": "6d4cf56db6"}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "lt-0-6d4cf56db6", Namespace: "default", UID: "5f1e0c2a-rs-lt-0-6d4cf56db6", Generation: 2},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "lt-0"}}, MinReadySeconds: 30,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}}},
	}
}

// podView is everything the controllers read of a pod, through the functions they read it with.
type podView struct {
	Name, Namespace, UID, Correlation string
	Labels                            map[string]string
	Created                           time.Time
	Controller                        string
	Index                             string
	Owners                            []string
	Active, Ready, Terminal, OwnedBy  bool
	Available                         [3]bool
}

func viewOf(s *Service, p *pb.Pod, rs *appsv1.ReplicaSet, now time.Time) podView {
	md := p.GetMetadata()
	v := podView{
		Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), Correlation: p.GetInternal().GetCorrelationId(),
		Labels: md.GetLabels(), Created: md.GetCreationTimestamp().AsTime(), Index: ownerIndex("default", compactPod(p)),
		Owners: s.podOwners("default", compactPod(p)), Active: isActive(p), Ready: isReady(p), Terminal: isTerminalPB(p), OwnedBy: isOwnedBy(p, rs),
	}
	if ref := controllerRefPB(md.GetOwnerReferences()); ref != nil {
		v.Controller = fmt.Sprintf("%s %s %s", ref.GetKind(), ref.GetName(), ref.GetUid())
	}
	for i, minReady := range []int32{0, 30, 3600} {
		v.Available[i] = isAvailable(p, minReady, now)
	}
	return v
}

// The cache keeps of a pod what the controllers read: on pods differing in each such field, what the
// controllers' functions make of a cached pod is what they make of the whole pod.
func TestPodMaskKeepsWhatControllersRead(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rs := maskRS()
	s := &Service{c: newCache()}
	s.c.setRS("default/"+rs.Name, &rsEntry{obj: rs})
	full := maskPods(t, now)
	var cached []*pb.Pod
	for _, p := range full {
		data, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := decodePod(data)
		if !ok {
			t.Fatalf("%s: not decoded", p.GetMetadata().GetName())
		}
		if proto.Size(c) >= proto.Size(p) {
			t.Errorf("%s: cached %d bytes of %d", p.GetMetadata().GetName(), proto.Size(c), proto.Size(p))
		}
		cached = append(cached, c)
	}
	for i := range full {
		want, got := viewOf(s, full[i], rs, now), viewOf(s, cached[i], rs, now)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\ncached %+v\nwhole  %+v", want.Name, got, want)
		}
	}
	names := func(ps []*pb.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.GetMetadata().GetName())
		}
		return out
	}
	if got, want := names(victims(cached, len(cached))), names(victims(full, len(full))); !slices.Equal(got, want) {
		t.Errorf("victims of cached pods %v, of whole pods %v", got, want)
	}
	// Every pair too, so that no field the ranking reads is hidden by another that decides first.
	for i := range full {
		for j := range i {
			got := names(victims([]*pb.Pod{cached[i], cached[j]}, 1))
			want := names(victims([]*pb.Pod{full[i], full[j]}, 1))
			if !slices.Equal(got, want) {
				t.Errorf("first victim of cached pods %v, of whole pods %v", got, want)
			}
		}
	}
	if got, want := rsStatus(rs, cached, now), rsStatus(rs, full, now); !reflect.DeepEqual(got, want) {
		t.Errorf("status from cached pods %+v, from whole pods %+v", got, want)
	}
}

// Adopting sends the whole stored pod with the new controller, and only at the revision the
// decision read.
func TestSetControllerSendsTheStoredPod(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := context.Background()
	s, err := New(Config{ID: "r0"}, c)
	if err != nil {
		t.Fatal(err)
	}
	if s.pods, err = bus.OpenBucket(ctx, c.JS, bus.BucketPods); err != nil {
		t.Fatal(err)
	}
	rs := maskRS()
	p := runningPod(t, 1)
	p.Metadata.OwnerReferences = nil
	key := bus.PodKey("default", p.GetMetadata().GetName())
	rev, err := bus.Create(ctx, s.pods, key, p)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(rev uint64) podEntry {
		data, _ := proto.Marshal(p)
		cp, _ := decodePod(data)
		return podEntry{pod: cp, rev: rev}
	}

	f, err := s.setController(ctx, entry(rev), rs, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Wait(ctx, f); err != nil {
		t.Fatal(err)
	}
	m := bustest.LastMsg(t, c, bus.StreamPods, bus.SubjPodUpdate)
	if m == nil {
		t.Fatal("no update sent")
	}
	cmd := bustest.Decode(t, m, &pb.PodCommand{})
	want := proto.Clone(p).(*pb.Pod)
	want.Metadata.OwnerReferences = []*pb.OwnerReference{ownerRef("apps/v1", "ReplicaSet", rs.Name, string(rs.UID))}
	want.Internal = nil
	if !proto.Equal(cmd.GetPod(), want) {
		t.Errorf("adoption sent %v\nwant %v", cmd.GetPod(), want)
	}
	if cmd.GetOp() != pb.PodCommand_OP_UPDATE || cmd.GetExpectedRevision() != rev || cmd.GetUser() != UserReplicaSet {
		t.Errorf("adoption command op %v, expected revision %d (want %d), user %q", cmd.GetOp(), cmd.GetExpectedRevision(), rev, cmd.GetUser())
	}

	// The pod changed since the cache's copy: decided again once the cache has it.
	p.Metadata.Labels["extra"] = "x"
	if _, err := bus.Update(ctx, s.pods, key, p, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := s.setController(ctx, entry(rev), rs, true); !errors.Is(err, errRequeue) {
		t.Errorf("adoption from a stale cache: %v, want errRequeue", err)
	}
	// Gone: nothing to do.
	if err := s.pods.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if f, err := s.setController(ctx, entry(rev), rs, false); f != nil || err != nil {
		t.Errorf("release of a deleted pod: %v, %v", f, err)
	}
	if n := len(bustest.Messages(t, c, bus.StreamPods, bus.SubjPodUpdate)); n != 1 {
		t.Errorf("%d updates sent, want 1", n)
	}
}

// A running replica adopts an orphan its ReplicaSet selects with the whole stored pod, though its
// cache keeps only part of it.
func TestReplicaSetAdoptsWithTheWholePod(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, "test")
	provisionApps(t, c)
	ctx := context.Background()
	pods, err := bus.OpenBucket(ctx, c.JS, bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	orphan := runningPod(t, 7)
	orphan.Metadata.OwnerReferences = nil
	orphan.Metadata.Labels = map[string]string{"app": "web"}
	if _, err := bus.Create(ctx, pods, bus.PodKey("default", orphan.GetMetadata().GetName()), orphan); err != nil {
		t.Fatal(err)
	}
	runFakeStore(t, c)
	startReplicas(t, c, url, 1)
	putRS(t, c, 1)
	bustest.Eventually(t, 30*time.Second, func() bool {
		return bustest.LastMsg(t, c, bus.StreamPods, bus.SubjPodUpdate) != nil
	}, "the orphan was not adopted")
	cmd := bustest.Decode(t, bustest.LastMsg(t, c, bus.StreamPods, bus.SubjPodUpdate), &pb.PodCommand{})
	want := proto.Clone(orphan).(*pb.Pod)
	want.Metadata.OwnerReferences = []*pb.OwnerReference{ownerRef("apps/v1", "ReplicaSet", "web", "rs-uid")}
	want.Internal = nil
	if !proto.Equal(cmd.GetPod(), want) {
		t.Errorf("adoption sent %v\nwant %v", cmd.GetPod(), want)
	}
}
