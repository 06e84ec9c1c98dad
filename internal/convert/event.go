package convert

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// EventFromPB converts a recorded event; resourceVersion is its stream sequence.
func EventFromPB(e *pb.Event, seq uint64) *corev1.Event {
	if e == nil {
		return nil
	}
	out := &corev1.Event{
		TypeMeta:            typeMeta("Event"),
		ObjectMeta:          metaFromPB(e.GetMetadata(), seq),
		Reason:              e.GetReason(),
		Message:             e.GetMessage(),
		FirstTimestamp:      fromTS(e.GetFirstTimestamp()),
		LastTimestamp:       fromTS(e.GetLastTimestamp()),
		Count:               e.GetCount(),
		Type:                e.GetType(),
		EventTime:           fromMicroTS(e.GetEventTime()),
		Action:              e.GetAction(),
		ReportingController: e.GetReportingComponent(),
		ReportingInstance:   e.GetReportingInstance(),
	}
	if o := e.GetInvolvedObject(); o != nil {
		out.InvolvedObject = corev1.ObjectReference{
			Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), UID: types.UID(o.GetUid()),
			APIVersion: o.GetApiVersion(), ResourceVersion: o.GetResourceVersion(), FieldPath: o.GetFieldPath(),
		}
	}
	if s := e.GetSource(); s != nil {
		out.Source = corev1.EventSource{Component: s.GetComponent(), Host: s.GetHost()}
	}
	return out
}
