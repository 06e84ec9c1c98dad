package workloads

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// prunedPod is the pruned message the cache kept before it kept cachedPods: podMask's fields, and of
// the conditions the first Ready one.
func prunedPod(t *testing.T, data []byte) *pb.Pod {
	t.Helper()
	pruned, ok := bus.Prune(data, podMask)
	p := &pb.Pod{}
	if !ok || proto.Unmarshal(pruned, p) != nil {
		t.Fatal("malformed pod")
	}
	if st := p.GetStatus(); st != nil {
		ready := podutil.PodCondition(p, "Ready")
		st.Conditions = nil
		if ready != nil {
			st.Conditions = []*pb.PodCondition{ready}
		}
	}
	return p
}

// A pod goes through the cache's flat form to the very message pruning it gives.
func TestCachedPodRoundTrip(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ts := timestamppb.New
	cases := map[string]func(p *pb.Pod){
		"running":  func(*pb.Pod) {},
		"orphan":   func(p *pb.Pod) { p.Metadata.OwnerReferences = nil },
		"deleting": func(p *pb.Pod) { p.Metadata.DeletionTimestamp = ts(now) },
		"several owners, the controller last": func(p *pb.Pod) {
			block := true
			p.Metadata.OwnerReferences = []*pb.OwnerReference{
				{ApiVersion: "v1", Kind: "ConfigMap", Name: "cm", Uid: "uid-cm"},
				{ApiVersion: "v1", Kind: "Secret", Name: "s", Uid: "uid-s", Controller: proto.Bool(false), BlockOwnerDeletion: &block},
				ownerRef("apps/v1", "ReplicaSet", "web", "uid-web"),
			}
		},
		"owner not a controller": func(p *pb.Pod) {
			p.Metadata.OwnerReferences[0].Controller = proto.Bool(false)
			p.Metadata.OwnerReferences[0].BlockOwnerDeletion = proto.Bool(false)
		},
		"empty owner reference": func(p *pb.Pod) { p.Metadata.OwnerReferences = []*pb.OwnerReference{{}} },
		"no Ready condition": func(p *pb.Pod) {
			p.Status.Conditions = []*pb.PodCondition{{Type: "PodScheduled", Status: "True", LastTransitionTime: ts(now)}}
		},
		"no conditions":        func(p *pb.Pod) { p.Status.Conditions = nil },
		"Ready, no transition": func(p *pb.Pod) { podCondition(p, "Ready").LastTransitionTime = nil },
		"Ready at the epoch":   func(p *pb.Pod) { podCondition(p, "Ready").LastTransitionTime = &timestamppb.Timestamp{} },
		"two Ready conditions": func(p *pb.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, &pb.PodCondition{Type: "Ready", Status: "False"})
		},
		"not ready": func(p *pb.Pod) { podCondition(p, "Ready").Status = "False" },
		"several containers": func(p *pb.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 2
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses,
				&pb.ContainerStatus{Name: "side"}, &pb.ContainerStatus{Name: "log", RestartCount: 7})
			p.Status.InitContainerStatuses = []*pb.ContainerStatus{{Name: "init", RestartCount: 1}}
		},
		"no container statuses": func(p *pb.Pod) { p.Status.ContainerStatuses = nil },
		"empty labels":          func(p *pb.Pod) { p.Metadata.Labels = nil },
		"unscheduled": func(p *pb.Pod) {
			p.Spec.NodeName = ""
			p.Status = &pb.PodStatus{Phase: "Pending"}
		},
		"empty status":     func(p *pb.Pod) { p.Status = &pb.PodStatus{} },
		"no status":        func(p *pb.Pod) { p.Status = nil },
		"no spec":          func(p *pb.Pod) { p.Spec = nil },
		"no internal":      func(p *pb.Pod) { p.Internal = nil },
		"empty internal":   func(p *pb.Pod) { p.Internal = &pb.PodInternal{ReportSeq: 9} },
		"no creation time": func(p *pb.Pod) { p.Metadata.CreationTimestamp = nil },
		"metadata without masked fields": func(p *pb.Pod) {
			p.Metadata = &pb.ObjectMeta{Annotations: map[string]string{"a": "b"}, Generation: 3}
		},
		"no metadata": func(p *pb.Pod) { p.Metadata = nil },
		"empty pod":   func(p *pb.Pod) { proto.Reset(p) },
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			p := runningPod(t, 3)
			change(p)
			data, err := proto.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			want := prunedPod(t, data)
			got, ok := decodePod(data)
			if !ok {
				t.Fatal("not decoded")
			}
			if !proto.Equal(got, want) {
				t.Errorf("decoded %v\nwant    %v", got, want)
			}
			if got := compactPod(p).pod(); !proto.Equal(got, want) {
				t.Errorf("compacted from the whole pod %v\nwant %v", got, want)
			}
			w, wok := wireCached(data)
			d, dok := decodeProto(data)
			if !wok || !dok || !reflect.DeepEqual(w, d) {
				t.Errorf("read from the wire (%t) %+v\ndecoded (%t)        %+v", wok, w, dok, d)
			}
			c, _ := decodeCached(data)
			var wantCtrl *pb.OwnerReference
			if ref := controllerRefPB(want.GetMetadata().GetOwnerReferences()); ref != nil {
				wantCtrl = ref
			}
			var gotCtrl *pb.OwnerReference
			if ref := c.controllerRef(); ref != nil {
				gotCtrl = ref.message(&pb.OwnerReference{}, new(bool), new(bool))
			}
			if !proto.Equal(gotCtrl, wantCtrl) {
				t.Errorf("controller %v, want %v", gotCtrl, wantCtrl)
			}
		})
	}
}

// A cached pod's message is its own: changing one does not change the next.
func TestCachedPodMessagesAreFresh(t *testing.T) {
	p := runningPod(t, 1)
	p.Metadata.OwnerReferences = append(p.Metadata.OwnerReferences, ownerRef("v1", "ConfigMap", "cm", "uid-cm"))
	p.Metadata.DeletionTimestamp = timestamppb.Now()
	c := compactPod(p)
	a := c.pod()
	want := proto.Clone(a)
	a.Metadata.OwnerReferences[0].Name = "x"
	*a.Metadata.OwnerReferences[1].Controller = false
	a.Metadata.DeletionTimestamp.Seconds = 1
	a.Status.ContainerStatuses[0].RestartCount = 5
	podCondition(a, "Ready").Status = "False"
	if b := c.pod(); !proto.Equal(b, want) {
		t.Errorf("after changing one message, the next is %v\nwant %v", b, want)
	}
}
