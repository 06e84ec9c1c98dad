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
		{"the first PodScheduled counts", pod("Pending", false, cond(podutil.True), cond(podutil.False)), false},
		{"unschedulable, then another", pod("Pending", false, cond(podutil.False), cond(podutil.True)), true},
		{"succeeded", pod("Succeeded", false, cond(podutil.False)), false},
		{"no phase", pod("", false, cond(podutil.False)), true},
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
			// The plain form an encoder writes is judged from the wire alone.
			if got := mayWaitForNode(data); got != tt.want {
				t.Errorf("mayWaitForNode = %v, want %v", got, tt.want)
			}
		})
	}
	if waitsForNodeWire([]byte{0xff, 0xff}) {
		t.Error("malformed data waits for a node")
	}
}

// Forms an encoder does not write go to the decoder, which judges them as it judges any pod.
func TestMayWaitForNodeLeavesOddFormsToTheDecoder(t *testing.T) {
	unschedulable := &pb.Pod{Status: &pb.PodStatus{Phase: "Pending",
		Conditions: []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.False}}}}
	plain, err := proto.Marshal(unschedulable)
	if err != nil {
		t.Fatal(err)
	}
	deleting, err := proto.Marshal(&pb.Pod{Metadata: &pb.ObjectMeta{DeletionTimestamp: timestamppb.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	noMeta, err := proto.Marshal(&pb.Pod{Metadata: &pb.ObjectMeta{Name: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	scheduled, err := proto.Marshal(&pb.Pod{Status: &pb.PodStatus{
		Conditions: []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.True}}}})
	if err != nil {
		t.Fatal(err)
	}
	failed, err := proto.Marshal(&pb.Pod{Status: &pb.PodStatus{Phase: "Failed"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
		want bool
	}{
		// A decoder merges the two: the deletion timestamp of the second one counts.
		{"metadata twice", append(append(append([]byte{}, noMeta...), deleting...), plain...), false},
		// Merged statuses: the second one's condition is appended after the first's.
		{"status twice", append(append([]byte{}, plain...), scheduled...), true},
		{"status twice, scheduled first", append(append([]byte{}, scheduled...), plain...), false},
		// The second status's phase replaces the first's terminal one.
		{"failed, then pending", append(append([]byte{}, failed...), plain...), true},
		{"truncated", plain[:len(plain)-1], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !mayWaitForNode(tt.data) {
				t.Error("mayWaitForNode judged a form it should leave to the decoder")
			}
			if got := waitsForNodeWire(tt.data); got != tt.want {
				t.Errorf("waitsForNodeWire = %v, want %v", got, tt.want)
			}
		})
	}
}

// On any bytes the wire reader never judges "no wait" where the decoder judges "wait".
func FuzzMayWaitForNode(f *testing.F) {
	for _, p := range []*pb.Pod{
		{Status: &pb.PodStatus{Phase: "Pending", Conditions: []*pb.PodCondition{{Type: podutil.PodScheduled, Status: podutil.False}}}},
		{Metadata: &pb.ObjectMeta{Name: "p", DeletionTimestamp: timestamppb.Now()}, Status: &pb.PodStatus{Phase: "Failed"}},
		{Status: &pb.PodStatus{Conditions: []*pb.PodCondition{{Type: "Ready"}, {Type: podutil.PodScheduled, Status: podutil.True}}}},
	} {
		data, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if waitsForNodeDecoded(data) && !mayWaitForNode(data) {
			t.Errorf("the decoder judges %x a wait, the wire reader no wait", data)
		}
	})
}
