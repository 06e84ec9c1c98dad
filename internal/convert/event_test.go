package convert

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

func TestEventFromPB(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 123456000, time.UTC)
	tests := []struct {
		name string
		in   *pb.Event
		seq  uint64
		want *corev1.Event
	}{
		{
			name: "full",
			seq:  17,
			in: &pb.Event{
				Metadata:       &pb.ObjectMeta{Name: "web.1823", Namespace: "prod", Uid: "e-uid", CreationTimestamp: timestamppb.New(at)},
				InvolvedObject: &pb.ObjectReference{Kind: "Pod", Namespace: "prod", Name: "web", Uid: "p-uid", ApiVersion: "v1", ResourceVersion: "5", FieldPath: "spec.containers{web}"},
				Reason:         "Scheduled", Message: "Successfully assigned prod/web to node-1",
				Source:         &pb.EventSource{Component: "binder", Host: "node-1"},
				FirstTimestamp: timestamppb.New(at), LastTimestamp: timestamppb.New(at.Add(time.Second)),
				Count: 2, Type: "Normal", EventTime: timestamppb.New(at), Action: "Binding",
				ReportingComponent: "podbus/binder", ReportingInstance: "binder-0",
			},
			want: &corev1.Event{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
				ObjectMeta: metav1.ObjectMeta{Name: "web.1823", Namespace: "prod", UID: "e-uid", ResourceVersion: "17", CreationTimestamp: metav1.NewTime(at)},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "prod", Name: "web", UID: "p-uid", APIVersion: "v1",
					ResourceVersion: "5", FieldPath: "spec.containers{web}"},
				Reason: "Scheduled", Message: "Successfully assigned prod/web to node-1",
				Source:         corev1.EventSource{Component: "binder", Host: "node-1"},
				FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at.Add(time.Second)),
				Count: 2, Type: "Normal", EventTime: metav1.NewMicroTime(at), Action: "Binding",
				ReportingController: "podbus/binder", ReportingInstance: "binder-0",
			},
		},
		{
			name: "sparse",
			seq:  1,
			in:   &pb.Event{Metadata: &pb.ObjectMeta{Name: "e"}, Reason: "Failed", Type: "Warning"},
			want: &corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
				ObjectMeta: metav1.ObjectMeta{Name: "e", ResourceVersion: "1"}, Reason: "Failed", Type: "Warning"},
		},
		{name: "nil", in: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, EventFromPB(tt.in, tt.seq)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
