package podutil

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The digest leaves out the conditions' heartbeat times and their transition times' values, sees
// everything else, and leaves the node as it was.
func TestNodeStatusDigest(t *testing.T) {
	t0, t1 := timestamppb.New(time.Unix(100, 0)), timestamppb.New(time.Unix(200, 0))
	node := func(edit func(*pb.Node)) *pb.Node {
		n := &pb.Node{Metadata: &pb.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "z1"}},
			Status: &pb.NodeStatus{Capacity: map[string]string{"cpu": "4"}, Conditions: []*pb.NodeCondition{
				{Type: NodeReady, Status: True, LastHeartbeatTime: t0, LastTransitionTime: t0}}}}
		if edit != nil {
			edit(n)
		}
		return n
	}
	base, ok := NodeStatusDigest(node(nil))
	if !ok {
		t.Fatal("no digest")
	}
	for _, tt := range []struct {
		name string
		edit func(*pb.Node)
		same bool
	}{
		{"heartbeat time", func(n *pb.Node) { n.Status.Conditions[0].LastHeartbeatTime = t1 }, true},
		{"transition time", func(n *pb.Node) { n.Status.Conditions[0].LastTransitionTime = t1 }, true},
		{"transition time unset", func(n *pb.Node) { n.Status.Conditions[0].LastTransitionTime = nil }, false},
		{"condition status", func(n *pb.Node) { n.Status.Conditions[0].Status = False }, false},
		{"capacity", func(n *pb.Node) { n.Status.Capacity["cpu"] = "8" }, false},
		{"label", func(n *pb.Node) { n.Metadata.Labels["zone"] = "z2" }, false},
	} {
		n := node(tt.edit)
		before := proto.Clone(n)
		got, ok := NodeStatusDigest(n)
		if !ok || (got == base) != tt.same {
			t.Errorf("%s: same digest %v, want %v", tt.name, got == base, tt.same)
		}
		if !proto.Equal(n, before) {
			t.Errorf("%s: the node changed", tt.name)
		}
	}
}
