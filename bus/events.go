package bus

import (
	"encoding/hex"
	"hash/fnv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Recorder records Kubernetes events on event.<ns>.<name>, like a component's EventRecorder.
type Recorder struct {
	pub       *Publisher
	component string
	host      string
}

// NewRecorder records events as component (scheduler, kubelet, ...) on host (node name or replica).
func NewRecorder(pub *Publisher, component, host string) *Recorder {
	return &Recorder{pub: pub, component: component, host: host}
}

// Event publishes one event asynchronously. dedup makes the event idempotent: the same object, reason
// and dedup key give the same event name and message id, so a redelivered step does not record twice.
func (r *Recorder) Event(obj *pb.ObjectReference, typ, reason, message, dedup string, at time.Time) (jetstream.PubAckFuture, error) {
	h := fnv.New64a()
	for _, s := range []string{obj.GetUid(), obj.GetName(), reason, r.component, dedup} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	id := hex.EncodeToString(h.Sum(nil))
	if at.IsZero() {
		at = time.Now()
	}
	ts := timestamppb.New(at)
	ev := &pb.Event{
		Metadata: &pb.ObjectMeta{
			Name:              obj.GetName() + "." + id,
			Namespace:         obj.GetNamespace(),
			Uid:               id,
			CreationTimestamp: ts,
		},
		InvolvedObject:     obj,
		Reason:             reason,
		Message:            message,
		Source:             &pb.EventSource{Component: r.component, Host: r.host},
		FirstTimestamp:     ts,
		LastTimestamp:      ts,
		Count:              1,
		Type:               typ,
		ReportingComponent: r.component,
		ReportingInstance:  r.host,
	}
	return r.pub.PublishAsync(SubjEvent(obj.GetNamespace(), obj.GetName()), ev, Meta{MsgID: "ev-" + id, PodUID: obj.GetUid()})
}

// PodRef is the ObjectReference of a pod.
func PodRef(p *pb.Pod) *pb.ObjectReference {
	md := p.GetMetadata()
	return &pb.ObjectReference{Kind: "Pod", ApiVersion: "v1", Namespace: md.GetNamespace(), Name: md.GetName(), Uid: md.GetUid()}
}
