package bus

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A spliced message reads back as the one encoded whole, and Field finds the spliced bytes again
// (as the scheduler takes the pod of a pending message into its decision).
func TestSpliceAndField(t *testing.T) {
	pod := &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: "web", Namespace: "default", Uid: "u1", Labels: map[string]string{"app": "web"}},
		Spec:     &pb.PodSpec{NodeName: "n1", Containers: []*pb.Container{{Name: "c", Image: "busybox"}}},
	}
	raw, err := proto.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	podField := FieldNumber(&pb.PendingPod{}, "pod")
	tests := []struct {
		name string
		msg  *pb.PendingPod // without its pod
	}{
		{"fields before and after the pod's number", &pb.PendingPod{Revision: 7, Cause: "created"}},
		{"nothing but the pod", &pb.PendingPod{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := Splice(tt.msg, podField, raw)
			if err != nil {
				t.Fatal(err)
			}
			got := &pb.PendingPod{}
			if err := proto.Unmarshal(data, got); err != nil {
				t.Fatal(err)
			}
			want := proto.Clone(tt.msg).(*pb.PendingPod)
			want.Pod = pod
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("spliced message (-want +got):\n%s", diff)
			}
			back, ok := Field(data, podField)
			if !ok || string(back) != string(raw) {
				t.Errorf("Field = %d bytes, %v; want the %d spliced bytes", len(back), ok, len(raw))
			}
		})
	}
}

func TestFieldRefuses(t *testing.T) {
	podField := FieldNumber(&pb.PendingPod{}, "pod")
	whole, _ := proto.Marshal(&pb.PendingPod{Pod: &pb.Pod{Metadata: &pb.ObjectMeta{Name: "a"}}, Revision: 3})
	twice := protowire.AppendBytes(protowire.AppendTag(whole, podField, protowire.BytesType), []byte{})
	tests := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"encoded whole", whole, true},
		{"absent", mustMarshal(t, &pb.PendingPod{Revision: 3}), false},
		{"twice (a reader merges the copies)", twice, false},
		{"cut short", whole[:len(whole)-1], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := Field(tt.data, podField); ok != tt.ok {
				t.Errorf("Field ok = %v, want %v", ok, tt.ok)
			}
		})
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
