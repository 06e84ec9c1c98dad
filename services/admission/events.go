package admission

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
	"github.com/podbus/podbus/services/admission/convert"
)

// Events come from the EVENTS stream: resourceVersion = stream sequence. The stream keeps an hour,
// so an older resourceVersion gets 410 Expired, as an etcd compaction would.

func decodeEvent(msg jetstream.Msg) (*corev1.Event, error) {
	md, err := msg.Metadata()
	if err != nil {
		return nil, err
	}
	e := &pb.Event{}
	if err := proto.Unmarshal(msg.Data(), e); err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	out := convert.EventFromPB(e, md.Sequence.Stream)
	out.TypeMeta = metav1.TypeMeta{Kind: "Event", APIVersion: "v1"}
	out.ResourceVersion = strconv.FormatUint(md.Sequence.Stream, 10)
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
// an earlier one (the recorder reuses names for repeats).
func (s *Service) listEvents(ctx context.Context, filter string, m matcher) ([]runtime.Object, uint64, error) {
	stream, err := s.conn.JS.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, 0, fmt.Errorf("events stream: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, 0, fmt.Errorf("events stream info: %w", err)
	}
	last := info.State.LastSeq
	total := uint64(0)
	for _, n := range info.State.Subjects {
		total += n
	}
	if total == 0 {
		return nil, last, nil
	}
	byName := map[string]int{}
	var out []runtime.Object
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = consumeOrdered(ctx, s.conn.JS, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}, func(msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		if md.NumPending == 0 || md.Sequence.Stream >= last {
			defer cancel()
		}
		e, err := decodeEvent(msg)
		if err != nil {
			bus.Count("admission.events.malformed", 1)
			return nil
		}
		if !m.matches(eventKind, e) {
			return nil
		}
		key := e.Namespace + "/" + e.Name
		if i, ok := byName[key]; ok {
			out[i] = e
			return nil
		}
		byName[key] = len(out)
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, last, nil
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
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	ww := startWatch(w, req, eventKind)
	if rv != 0 {
		if rv+1 < state.FirstSeq {
			ww.sendError(expired(rv, state.FirstSeq))
			return
		}
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = rv + 1
	}
	err = consumeOrdered(ctx, s.conn.JS, bus.StreamEvents, cfg, func(msg jetstream.Msg) error {
		e, err := decodeEvent(msg)
		if err != nil {
			bus.Count("admission.events.malformed", 1)
			return nil
		}
		if !m.matches(eventKind, e) {
			return nil
		}
		return ww.send(watchAdded, e)
	})
	if err != nil {
		ww.sendError(err)
	}
}
