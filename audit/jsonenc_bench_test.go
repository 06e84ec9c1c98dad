package audit

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

func benchPod() *pb.Pod {
	return &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: "p-1", Namespace: "default", Uid: "uid-1", CreationTimestamp: timestamppb.Now(), Labels: map[string]string{"app": "bench"}},
		Spec: &pb.PodSpec{NodeName: "node-1", Containers: []*pb.Container{{Name: "app", Image: "example.local/app:1",
			Resources: &pb.ResourceRequirements{Requests: map[string]string{"cpu": "100m", "memory": "128Mi"}}}}},
		Status: &pb.PodStatus{Phase: "Running", QosClass: "Burstable"},
	}
}

func BenchmarkAppendProtoJSON(b *testing.B) {
	m := benchPod()
	b.Run("fast", func(b *testing.B) {
		var buf []byte
		for i := 0; i < b.N; i++ {
			buf, _ = appendProtoJSON(buf[:0], m)
		}
	})
	b.Run("protojson", func(b *testing.B) {
		var buf []byte
		for i := 0; i < b.N; i++ {
			buf, _ = protojson.MarshalOptions{}.MarshalAppend(buf[:0], m)
		}
	})
}
