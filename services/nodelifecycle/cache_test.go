package nodelifecycle

import (
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/podbus/podbus/internal/podtest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Pods with the same tolerations share one decoded copy; each cached pod keeps what the store has.
func TestCachedPodTolerations(t *testing.T) {
	s := testService()
	entries, _ := podtest.Entries(4)
	odd := podtest.RunningPod(3)
	odd.Spec.Tolerations = append(odd.Spec.Tolerations, &pb.Toleration{Key: "dedicated", Operator: "Equal", Value: "db", Effect: "NoExecute"})
	entries[3].V, _ = proto.Marshal(odd)
	none := podtest.RunningPod(2)
	none.Spec.Tolerations = nil
	entries[2].V, _ = proto.Marshal(none)
	for _, e := range entries {
		s.onPod(e)
	}
	for i, e := range entries {
		p := &pb.Pod{}
		if err := proto.Unmarshal(e.V, p); err != nil {
			t.Fatal(err)
		}
		c := s.pods[e.K]
		if d := gocmp.Diff(p.GetSpec().GetTolerations(), c.tolerations, protocmp.Transform()); d != "" {
			t.Errorf("pod %d tolerations (-stored +cached):\n%s", i, d)
		}
		if c.ns != p.GetMetadata().GetNamespace() || c.node != p.GetSpec().GetNodeName() || c.uid() != p.GetMetadata().GetUid() ||
			c.name() != p.GetMetadata().GetName() || c.correlation() != p.GetInternal().GetCorrelationId() {
			t.Errorf("pod %d cached as %+v", i, c)
		}
	}
	if a, b := s.pods[entries[0].K].tolerations, s.pods[entries[1].K].tolerations; &a[0] != &b[0] {
		t.Errorf("equal tolerations not shared")
	}
}
