package admission

import (
	"context"
	"fmt"
	"net/http"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/convert"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Events come from the EVENTS stream. An event may be stored alone on its subject or as an entry of its
// namespace's batch (bus.GroupSubject), so its resourceVersion is its position: stream sequence << 10 |
// index in the batch (bus.Position), which orders events like the stream. The stream keeps an hour, so
// an older resourceVersion gets 410 Expired, as an etcd compaction would.

var eventKind = &kind{
	version: "v1", kind: "Event", resource: "events", singular: "event", namespaced: true,
	shortNames: []string{"ev"}, verbs: []string{"get", "list", "watch"},
	newObject: func() runtime.Object { return &corev1.Event{} },
	columns:   eventColumns,
	cells:     func(o runtime.Object) []any { return eventRow(o.(*corev1.Event)) },
	fields: func(o runtime.Object) fields.Set {
		e := o.(*corev1.Event)
		return fields.Set{
			"metadata.name":                  e.Name,
			"metadata.namespace":             e.Namespace,
			"involvedObject.kind":            e.InvolvedObject.Kind,
			"involvedObject.namespace":       e.InvolvedObject.Namespace,
			"involvedObject.name":            e.InvolvedObject.Name,
			"involvedObject.uid":             string(e.InvolvedObject.UID),
			"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
			"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
			"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
			"reason":                         e.Reason,
			"reportingComponent":             e.ReportingController,
			"source":                         e.Source.Component,
			"type":                           e.Type,
		}
	},
}

// decodeEvents returns the events of a stored message that match filter and come after position
// after, each with its position as resourceVersion, and counts (and skips) what does not decode.
func decodeEvents(msg jetstream.Msg, filter string, after uint64) ([]*corev1.Event, error) {
	md, err := msg.Metadata()
	if err != nil {
		return nil, err
	}
	entries, err := bus.Unbatch(msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		metrics.Count("admission.events.malformed", 1)
		return nil, nil
	}
	var out []*corev1.Event
	for i, en := range entries {
		pos := bus.Position(md.Sequence.Stream, i)
		if pos <= after || !bus.SubjectMatches(filter, en.Subject) {
			continue
		}
		e := &pb.Event{}
		if err := proto.Unmarshal(en.Data, e); err != nil {
			metrics.Count("admission.events.malformed", 1)
			continue
		}
		ev := convert.EventFromPB(e, pos) // resourceVersion: the position
		ev.TypeMeta = metav1.TypeMeta{Kind: "Event", APIVersion: "v1"}
		out = append(out, ev)
	}
	return out, nil
}

// eventFilter picks the narrowest subject: one object's events when the selector names it.
func eventFilter(ns string, m matcher) string {
	name := m.fieldValue("involvedObject.name")
	objNS := m.fieldValue("involvedObject.namespace")
	if name != "" && (ns != "" || objNS != "") {
		if ns == "" {
			ns = objNS
		}
		return bus.SubjEvent(ns, name)
	}
	return bus.SubjEventsFor(ns)
}

func (s *Service) serveEvents(w http.ResponseWriter, r *http.Request, req request) {
	if req.sub != "" {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if r.Method != http.MethodGet {
		writeStatus(w, methodNotAllowed(grEvents, r.Method))
		return
	}
	m, err := newMatcher(req.q, eventKind)
	if err != nil {
		writeStatus(w, err)
		return
	}
	filter := eventFilter(req.ns, m)
	if req.watch {
		s.watchEvents(w, r, req, filter, m)
		return
	}
	objs, rv, err := s.listEvents(r.Context(), filter, m)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if req.name != "" {
		for _, o := range objs {
			if o.(*corev1.Event).Name == req.name {
				writeObject(w, http.StatusOK, req, eventKind, o)
				return
			}
		}
		writeStatus(w, apierrors.NewNotFound(grEvents, req.name))
		return
	}
	writeList(w, req, eventKind, objs, rv)
}

// listEvents reads the events under filter that match m; a later event of the same name replaces
// an earlier one (the recorder reuses names for repeats). The list's resourceVersion is past every
// entry of the stream's last message.
func (s *Service) listEvents(ctx context.Context, filter string, m matcher) ([]runtime.Object, uint64, error) {
	stream, err := s.conn.JS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, 0, fmt.Errorf("events stream: %w", err)
	}
	filters := bus.ReadFilters(filter)
	last, total := uint64(0), uint64(0)
	for _, f := range filters {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return nil, 0, fmt.Errorf("events stream info: %w", err)
		}
		last = max(last, info.State.LastSeq)
		for _, n := range info.State.Subjects {
			total += n
		}
	}
	listRV := bus.Position(last, bus.MaxBatchEntries-1)
	if total == 0 {
		return nil, listRV, nil
	}
	byName := map[string]int{}
	var out []runtime.Object
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = consumeOrdered(ctx, s.conn.JS, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}, func(msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		if md.NumPending == 0 || md.Sequence.Stream >= last {
			defer cancel()
		}
		if md.Sequence.Stream > last {
			return nil
		}
		evs, err := decodeEvents(msg, filter, 0)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if !m.matches(eventKind, e) {
				continue
			}
			key := e.Namespace + "/" + e.Name
			if i, ok := byName[key]; ok {
				out[i] = e
				continue
			}
			byName[key] = len(out)
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, listRV, nil
}

// watchEvents streams events after resourceVersion (all current ones first when it is 0).
func (s *Service) watchEvents(w http.ResponseWriter, r *http.Request, req request, filter string, m matcher) {
	rv, err := parseRV(req.q.Get("resourceVersion"))
	if err != nil {
		writeStatus(w, err)
		return
	}
	ctx, cancel := watchContext(r, req)
	defer cancel()
	stream, err := s.conn.JS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		writeStatus(w, fmt.Errorf("events stream: %w", err))
		return
	}
	state := stream.CachedInfo().State
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: bus.ReadFilters(filter), DeliverPolicy: jetstream.DeliverAllPolicy}
	ww := startWatch(w, req, eventKind)
	if rv != 0 {
		// The message holding rv is read again for the entries after it.
		seq := rv >> bus.PositionBits
		if seq+1 < state.FirstSeq {
			ww.sendError(expired(rv, bus.Position(state.FirstSeq, 0)))
			return
		}
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = max(seq, 1)
	}
	err = consumeOrdered(ctx, s.conn.JS, bus.StreamEvents, cfg, func(msg jetstream.Msg) error {
		evs, err := decodeEvents(msg, filter, rv)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if !m.matches(eventKind, e) {
				continue
			}
			if err := ww.send(watchAdded, e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		ww.sendError(err)
	}
}
