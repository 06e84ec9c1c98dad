package scheduler

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/internal/podutil"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The pods watch judges a pod from a few of its fields; it must judge as the whole pod would.
func TestWaitsForNodeWire(t *testing.T) {
	cond := func(status string) *pb.PodCondition {
		return &pb.PodCondition{Type: podutil.PodScheduled, Status: status, Reason: "Unschedulable", Message: "0/3 nodes"}
	}
	pod := func(phase string, deleting bool, conds ...*pb.PodCondition) *pb.Pod {
		p := &pb.Pod{
			Metadata: &pb.ObjectMeta{Name: "p", Namespace: "default", Uid: "u", Labels: map[string]string{"app": "x"}},
			Spec:     &pb.PodSpec{Containers: []*pb.Container{{Name: "c", Image: "busybox"}}},
			Status:   &pb.PodStatus{Phase: phase, Conditions: append([]*pb.PodCondition{{Type: "Ready", Status: "False"}}, conds...)},
		}
		if deleting {
			p.Metadata.DeletionTimestamp = timestamppb.Now()
		}
		return p
	}
	tests := []struct {
		name string
		pod  *pb.Pod
		want bool
	}{
		{"judged unschedulable", pod("Pending", false, cond(podutil.False)), true},
		{"bound", pod("Pending", false, cond(podutil.True)), false},
		{"not judged yet", pod("Pending", false), false},
		{"unschedulable and deleting", pod("Pending", true, cond(podutil.False)), false},
		{"unschedulable and failed", pod("Failed", false, cond(podutil.False)), false},
		{"empty", &pb.Pod{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := proto.Marshal(tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got := waitsForNodeWire(data); got != tt.want || waitsForNode(tt.pod) != tt.want {
				t.Errorf("waitsForNodeWire = %v, waitsForNode = %v; want %v", got, waitsForNode(tt.pod), tt.want)
			}
		})
	}
	if waitsForNodeWire([]byte{0xff, 0xff}) {
		t.Error("malformed data waits for a node")
	}
}
