package admission

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// The watch cache indexes a stored pod without converting it; the labels and selectable fields must be
// those of the API object the pod converts to.
func TestPodIndexMatchesDecode(t *testing.T) {
	tests := []struct {
		name string
		pod  *pb.Pod
	}{
		{name: "empty", pod: &pb.Pod{}},
		{name: "new", pod: &pb.Pod{Metadata: &pb.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "x"}},
			Spec: &pb.PodSpec{RestartPolicy: "Always", SchedulerName: "default-scheduler", ServiceAccountName: "default"}}},
		{name: "running", pod: &pb.Pod{Metadata: &pb.ObjectMeta{Name: "b", Namespace: "ns"},
			Spec:   &pb.PodSpec{NodeName: "node-1", HostNetwork: true, RestartPolicy: "Never"},
			Status: &pb.PodStatus{Phase: "Running", PodIp: "10.0.0.1", NominatedNodeName: "node-2"}}},
		{name: "every field set, beside others the index skips", pod: &pb.Pod{
			Metadata: &pb.ObjectMeta{Name: "c", Namespace: "ns", Uid: "u", Labels: map[string]string{"app": "x", "tier": "y"},
				Annotations: map[string]string{"a": "b"}},
			Spec: &pb.PodSpec{NodeName: "node-1", HostNetwork: true, RestartPolicy: "OnFailure", SchedulerName: "s",
				ServiceAccountName: "sa", Containers: []*pb.Container{{Name: "c", Image: "busybox"}}},
			Status: &pb.PodStatus{Phase: "Pending", PodIp: "10.0.0.2", NominatedNodeName: "node-3",
				Conditions: []*pb.PodCondition{{Type: "PodScheduled", Status: "True"}}},
			Internal: &pb.PodInternal{CorrelationId: "c", ReportSeq: 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := proto.Marshal(tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			o, err := podKind.decodeEntry("", data, 7)
			if err != nil {
				t.Fatal(err)
			}
			lbls, fs, err := podKind.storage.index(data)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(map[string]string(podKind.fieldSet(o)), map[string]string(fs)); d != "" {
				t.Errorf("fields (-decoded +indexed):\n%s", d)
			}
			if len(lbls) != 0 || len(objectMeta(o).Labels) != 0 {
				if d := cmp.Diff(objectMeta(o).Labels, lbls); d != "" {
					t.Errorf("labels (-decoded +indexed):\n%s", d)
				}
			}
		})
	}
	if _, _, err := podKind.storage.index([]byte{0xff}); err == nil {
		t.Error("an undecodable pod indexed")
	}
}
