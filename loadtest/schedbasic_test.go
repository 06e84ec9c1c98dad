package loadtest

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The observer reads a binding off the wire: spec.nodeName, whatever else the pod holds.
func TestNodeName(t *testing.T) {
	tests := []struct {
		name string
		pod  *pb.Pod
		want string
	}{
		{"bound", &pb.Pod{Metadata: &pb.ObjectMeta{Name: "a"}, Spec: &pb.PodSpec{NodeName: "node-7",
			Containers: []*pb.Container{{Name: "c", Image: "pause"}}}, Status: &pb.PodStatus{Phase: "Pending"}}, "node-7"},
		{"unbound", &pb.Pod{Metadata: &pb.ObjectMeta{Name: "a"}, Spec: &pb.PodSpec{SchedulerName: "default-scheduler"}}, ""},
		{"no spec", &pb.Pod{Metadata: &pb.ObjectMeta{Name: "a"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := proto.Marshal(tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got := nodeName(data); got != tt.want {
				t.Errorf("nodeName = %q, want %q", got, tt.want)
			}
		})
	}
}
