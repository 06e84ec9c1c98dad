package events

import (
	"encoding/binary"
	"encoding/hex"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/fnv1a"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Recorder records Kubernetes events on event.<ns>.<name>, like a component's EventRecorder.
type Recorder struct {
	pub       EventPublisher
	component string
	host      string
}

// EventPublisher is a Publisher or, where events come in bulk, a Batcher: it stores the events of one
// namespace that were recorded together as one message.
type EventPublisher interface {
	PublishAsync(subject string, m proto.Message, meta bus.Meta) (jetstream.PubAckFuture, error)
}

// NewRecorder records events as component (scheduler, kubelet, ...) on host (node name or replica).
func NewRecorder(pub EventPublisher, component, host string) *Recorder {
	return &Recorder{pub: pub, component: component, host: host}
}

// Event publishes one event asynchronously. dedup makes the event idempotent: the same object, reason
// and dedup key give the same event name and message id, so a redelivered step does not record twice
// (in a batch, which has no message id, it is stored twice under the same name, and a list shows it
// once).
func (r *Recorder) Event(obj *pb.ObjectReference, typ, reason, message, dedup string, at time.Time) (jetstream.PubAckFuture, error) {
	id := eventID(obj.GetUid(), obj.GetName(), reason, r.component, dedup)
	if at.IsZero() {
		at = time.Now()
	}
	// The event and its parts are one allocation: every step of every pod records events.
	e := &eventParts{}
	e.ts.Seconds, e.ts.Nanos = at.Unix(), int32(at.Nanosecond())
	e.md.Name, e.md.Namespace, e.md.Uid, e.md.CreationTimestamp = obj.GetName()+"."+id, obj.GetNamespace(), id, &e.ts
	e.src.Component, e.src.Host = r.component, r.host
	ev := &e.ev
	ev.Metadata, ev.InvolvedObject, ev.Source = &e.md, obj, &e.src
	ev.Reason, ev.Message, ev.Type, ev.Count = reason, message, typ, 1
	ev.FirstTimestamp, ev.LastTimestamp = &e.ts, &e.ts
	ev.ReportingComponent, ev.ReportingInstance = r.component, r.host
	return r.pub.PublishAsync(bus.SubjEvent(obj.GetNamespace(), obj.GetName()), ev, bus.Meta{MsgID: "ev-" + id, PodUID: obj.GetUid()})
}

// eventParts are an event's messages.
type eventParts struct {
	ev  pb.Event
	md  pb.ObjectMeta
	src pb.EventSource
	ts  timestamppb.Timestamp
}

// eventID is the hex FNV-1a (64-bit) of the parts, each followed by a zero byte, computed without
// allocating but for the result: every step of every pod records events.
func eventID(parts ...string) string {
	h := fnv1a.Offset64
	for _, s := range parts {
		h = fnv1a.AddByte(fnv1a.AddString(h, s), 0)
	}
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], h)
	var out [16]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// PodRef is the ObjectReference of a pod.
func PodRef(p *pb.Pod) *pb.ObjectReference {
	md := p.GetMetadata()
	return &pb.ObjectReference{Kind: "Pod", ApiVersion: "v1", Namespace: md.GetNamespace(), Name: md.GetName(), Uid: md.GetUid()}
}
