package podutil

import (
	"crypto/sha256"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// NodeStatusDigest is a digest of what a heartbeat carrying n would merge into the stored node: the
// conditions' heartbeat times left out, and of their transition times only whether they are set (a
// condition whose status did not change keeps the stored one); ok false if n does not encode. The
// agent sends it with each heartbeat and the status service computes it of what it applies, so both
// must compute it here. n is restored before it returns.
func NodeStatusDigest(n *pb.Node) (sum [sha256.Size]byte, ok bool) {
	conds := n.GetStatus().GetConditions()
	saved := make([][2]*timestamppb.Timestamp, len(conds))
	set := &timestamppb.Timestamp{}
	for i, c := range conds {
		saved[i] = [2]*timestamppb.Timestamp{c.LastHeartbeatTime, c.LastTransitionTime}
		c.LastHeartbeatTime = nil
		if c.LastTransitionTime != nil {
			c.LastTransitionTime = set
		}
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(n)
	for i, c := range conds {
		c.LastHeartbeatTime, c.LastTransitionTime = saved[i][0], saved[i][1]
	}
	if err != nil {
		return sum, false
	}
	return sha256.Sum256(data), true
}
