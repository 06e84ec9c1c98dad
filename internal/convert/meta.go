package convert

import (
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// toTS keeps sub-second precision; the zero time is "unset".
func toTS(t metav1.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t.Time)
}

func toTSPtr(t *metav1.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return toTS(*t)
}

func fromTS(ts *timestamppb.Timestamp) metav1.Time {
	if ts == nil {
		return metav1.Time{}
	}
	return metav1.NewTime(ts.AsTime())
}

func fromTSPtr(ts *timestamppb.Timestamp) *metav1.Time {
	if ts == nil {
		return nil
	}
	t := fromTS(ts)
	return &t
}

func fromMicroTS(ts *timestamppb.Timestamp) metav1.MicroTime {
	if ts == nil {
		return metav1.MicroTime{}
	}
	return metav1.NewMicroTime(ts.AsTime())
}

// revisionString renders a KV revision or stream sequence; 0 means "not known" and stays empty.
func revisionString(rev uint64) string {
	if rev == 0 {
		return ""
	}
	return strconv.FormatUint(rev, 10)
}

// copyMap returns nil for an empty map so that round trips do not turn nil into {}.
func copyMap[M ~map[K]V, K comparable, V any](m M) map[K]V {
	if len(m) == 0 {
		return nil
	}
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func copyStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}

func ptrCopy[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// resourceVersion is deliberately not converted: it is the KV revision, never stored.
func metaToPB(m *metav1.ObjectMeta) *pb.ObjectMeta {
	out := &pb.ObjectMeta{
		Name:                       m.Name,
		GenerateName:               m.GenerateName,
		Namespace:                  m.Namespace,
		Uid:                        string(m.UID),
		Generation:                 m.Generation,
		Labels:                     copyMap(m.Labels),
		Annotations:                copyMap(m.Annotations),
		CreationTimestamp:          toTS(m.CreationTimestamp),
		DeletionTimestamp:          toTSPtr(m.DeletionTimestamp),
		DeletionGracePeriodSeconds: ptrCopy(m.DeletionGracePeriodSeconds),
		Finalizers:                 copyStrings(m.Finalizers),
	}
	for _, o := range m.OwnerReferences {
		out.OwnerReferences = append(out.OwnerReferences, &pb.OwnerReference{
			ApiVersion:         o.APIVersion,
			Kind:               o.Kind,
			Name:               o.Name,
			Uid:                string(o.UID),
			Controller:         ptrCopy(o.Controller),
			BlockOwnerDeletion: ptrCopy(o.BlockOwnerDeletion),
		})
	}
	return out
}

func metaFromPB(m *pb.ObjectMeta, rev uint64) metav1.ObjectMeta {
	if m == nil {
		return metav1.ObjectMeta{ResourceVersion: revisionString(rev)}
	}
	out := metav1.ObjectMeta{
		Name:                       m.GetName(),
		GenerateName:               m.GetGenerateName(),
		Namespace:                  m.GetNamespace(),
		UID:                        types.UID(m.GetUid()),
		ResourceVersion:            revisionString(rev),
		Generation:                 m.GetGeneration(),
		Labels:                     copyMap(m.GetLabels()),
		Annotations:                copyMap(m.GetAnnotations()),
		CreationTimestamp:          fromTS(m.GetCreationTimestamp()),
		DeletionTimestamp:          fromTSPtr(m.GetDeletionTimestamp()),
		DeletionGracePeriodSeconds: ptrCopy(m.DeletionGracePeriodSeconds),
		Finalizers:                 copyStrings(m.GetFinalizers()),
	}
	for _, o := range m.GetOwnerReferences() {
		out.OwnerReferences = append(out.OwnerReferences, metav1.OwnerReference{
			APIVersion:         o.GetApiVersion(),
			Kind:               o.GetKind(),
			Name:               o.GetName(),
			UID:                types.UID(o.GetUid()),
			Controller:         ptrCopy(o.Controller),
			BlockOwnerDeletion: ptrCopy(o.BlockOwnerDeletion),
		})
	}
	return out
}

func labelSelectorToPB(s *metav1.LabelSelector) *pb.LabelSelector {
	if s == nil {
		return nil
	}
	out := &pb.LabelSelector{MatchLabels: copyMap(s.MatchLabels)}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, &pb.LabelSelectorRequirement{
			Key: r.Key, Operator: string(r.Operator), Values: copyStrings(r.Values),
		})
	}
	return out
}

func labelSelectorFromPB(s *pb.LabelSelector) *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := &metav1.LabelSelector{MatchLabels: copyMap(s.GetMatchLabels())}
	for _, r := range s.GetMatchExpressions() {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: r.GetKey(), Operator: metav1.LabelSelectorOperator(r.GetOperator()), Values: copyStrings(r.GetValues()),
		})
	}
	return out
}
