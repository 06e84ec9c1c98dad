package bus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// prunePaths are the fields the tests keep: a whole message, a message pruned in turn, a repeated
// message pruned in turn and scalars at each depth.
var prunePaths = []string{"metadata.uid", "metadata.deletion_timestamp", "spec.node_name", "spec.tolerations",
	"status.phase", "status.conditions.type", "status.conditions.status", "internal"}

// project is pod with only prunePaths set, built from the decoded message: what decoding a pruned
// wire form must give.
func project(pod *pb.Pod) *pb.Pod {
	out := &pb.Pod{Internal: pod.GetInternal()}
	if md := pod.GetMetadata(); md != nil {
		out.Metadata = &pb.ObjectMeta{Uid: md.GetUid(), DeletionTimestamp: md.GetDeletionTimestamp()}
	}
	if sp := pod.GetSpec(); sp != nil {
		out.Spec = &pb.PodSpec{NodeName: sp.GetNodeName(), Tolerations: sp.GetTolerations()}
	}
	if st := pod.GetStatus(); st != nil {
		out.Status = &pb.PodStatus{Phase: st.GetPhase()}
		for _, c := range st.GetConditions() {
			out.Status.Conditions = append(out.Status.Conditions, &pb.PodCondition{Type: c.GetType(), Status: c.GetStatus()})
		}
	}
	return out
}

func TestPruneDecodesAsTheWhole(t *testing.T) {
	full := &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"a": "b"}, DeletionTimestamp: timestamppb.New(timestamppb.Now().AsTime())},
		Spec: &pb.PodSpec{NodeName: "n1", Containers: []*pb.Container{{Name: "c", Image: "busybox"}},
			Tolerations: []*pb.Toleration{{Key: "k", Operator: "Exists"}}},
		Status: &pb.PodStatus{Phase: "Running", PodIp: "10.0.0.1", Conditions: []*pb.PodCondition{
			{Type: "PodScheduled", Status: "True", Reason: "r", LastTransitionTime: timestamppb.Now()},
			{Type: "Ready", Status: "False", Message: "m"}}},
		Internal: &pb.PodInternal{CorrelationId: "c1", ReportSeq: 9},
	}
	later := &pb.Pod{ // merged into full when both are on the wire: scalars replaced, repeated appended
		Metadata: &pb.ObjectMeta{Uid: "u2"},
		Spec:     &pb.PodSpec{Tolerations: []*pb.Toleration{{Key: "k2"}}},
		Status:   &pb.PodStatus{Conditions: []*pb.PodCondition{{Type: "Initialized", Status: "True"}}},
	}
	wire := func(ps ...*pb.Pod) []byte {
		var out []byte
		for _, p := range ps {
			b, err := proto.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b...)
		}
		return out
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"every kind of field", wire(full)},
		{"empty pod", wire(&pb.Pod{})},
		{"no field kept", wire(&pb.Pod{Spec: &pb.PodSpec{Containers: []*pb.Container{{Name: "c"}}}})},
		{"occurrences merged", wire(full, later)},
	}
	mask := NewMask(&pb.Pod{}, prunePaths...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole := &pb.Pod{}
			if err := proto.Unmarshal(tt.data, whole); err != nil {
				t.Fatal(err)
			}
			pruned, ok := Prune(tt.data, mask)
			if !ok {
				t.Fatal("Prune refused a well-formed pod")
			}
			got := &pb.Pod{}
			if err := proto.Unmarshal(pruned, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(project(whole), got, protocmp.Transform()); diff != "" {
				t.Errorf("pruned pod (-want +got):\n%s", diff)
			}
			if len(pruned) > len(tt.data) {
				t.Errorf("pruned to %d bytes from %d", len(pruned), len(tt.data))
			}
		})
	}
}

func TestPruneRefusesMalformed(t *testing.T) {
	good, _ := proto.Marshal(&pb.Pod{Metadata: &pb.ObjectMeta{Uid: "u"}, Status: &pb.PodStatus{Phase: "Running"}})
	mask := NewMask(&pb.Pod{}, prunePaths...)
	tests := []struct {
		name string
		data []byte
	}{
		{"truncated", good[:len(good)-2]},
		{"bad tag", append([]byte{0xff}, good...)},
		{"malformed inside a pruned message", []byte{0x1a, 0x02, 0x0a, 0x05}}, // status{phase: 5 bytes of 0}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := Prune(tt.data, mask); ok {
				t.Error("Prune accepted malformed data")
			}
		})
	}
}

func TestNewMaskPanicsOnUnknownField(t *testing.T) {
	for _, path := range []string{"metadata.nope", "status.phase.x", "metadata.labels.app"} {
		t.Run(path, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("NewMask(%q) did not panic", path)
				}
			}()
			NewMask(&pb.Pod{}, path)
		})
	}
}

// BenchmarkPrune compares decoding a stored pod whole with pruning it to a watcher's fields first.
func BenchmarkPrune(b *testing.B) {
	pod := &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: "web-1234", Namespace: "default", Uid: "0b6f8a3e-uid", Labels: map[string]string{"app": "web", "tier": "front"},
			CreationTimestamp: timestamppb.Now()},
		Spec: &pb.PodSpec{NodeName: "node-17", SchedulerName: "default-scheduler", Containers: []*pb.Container{{Name: "c", Image: "busybox"}}},
		Status: &pb.PodStatus{Phase: "Running", PodIp: "10.0.0.1", Conditions: []*pb.PodCondition{
			{Type: "PodScheduled", Status: "True", LastTransitionTime: timestamppb.Now()},
			{Type: "Ready", Status: "True", LastTransitionTime: timestamppb.Now()}},
			ContainerStatuses: []*pb.ContainerStatus{{Name: "c", Image: "busybox", Ready: true}}},
		Internal: &pb.PodInternal{CorrelationId: "corr", ReportSeq: 3},
	}
	data, err := proto.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(data, &pb.Pod{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	mask := NewMask(&pb.Pod{}, "metadata.deletion_timestamp", "status.phase", "status.conditions.type", "status.conditions.status")
	b.Run("pruned", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pruned, _ := Prune(data, mask)
			if err := proto.Unmarshal(pruned, &pb.Pod{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
