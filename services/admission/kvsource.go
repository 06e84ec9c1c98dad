package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
)

// kvSource serves one KV bucket as a Kubernetes resource: resourceVersion = KV revision, a list's
// resourceVersion = the bucket stream's last sequence, watches = an ordered consumer on that stream.
type kvSource struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
	ki *kind
	// decode turns a stored value into the API object, with resourceVersion rev.
	decode func(key string, value []byte, rev uint64) (runtime.Object, error)
	// tombstone is the object sent in a DELETED event when the last state is unknown.
	tombstone func(key string, rev uint64) runtime.Object
}

func (s *kvSource) stream() string { return "KV_" + s.kv.Bucket() }

// get reads one object; a 404 Status when absent.
func (s *kvSource) get(ctx context.Context, key, name string) (runtime.Object, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, apierrors.NewNotFound(s.ki.gr(), name)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", s.kv.Bucket(), key, err)
	}
	o, err := s.decode(key, e.Value(), e.Revision())
	if err != nil {
		return nil, 0, err
	}
	return o, e.Revision(), nil
}

// streamState returns the first and last sequence of the bucket's stream.
func (s *kvSource) streamState(ctx context.Context) (first, last uint64, err error) {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("status of bucket %s: %w", s.kv.Bucket(), err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, 0, fmt.Errorf("status of bucket %s: unexpected %T", s.kv.Bucket(), st)
	}
	info := bs.StreamInfo()
	return info.State.FirstSeq, info.State.LastSeq, nil
}

// list reads the current values under filter (a key pattern) that match m.
func (s *kvSource) list(ctx context.Context, filter string, m matcher) ([]runtime.Object, uint64, error) {
	_, last, err := s.streamState(ctx)
	if err != nil {
		return nil, 0, err
	}
	w, err := s.kv.Watch(ctx, filter)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", s.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	rv := last
	var out []runtime.Object
	for {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case e := <-w.Updates():
			if e == nil {
				return out, rv, nil
			}
			rv = max(rv, e.Revision())
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			o, err := s.decode(e.Key(), e.Value(), e.Revision())
			if err != nil {
				metrics.Count("admission.list.malformed", 1)
				continue
			}
			if m.matches(s.ki, o) {
				out = append(out, o)
			}
		}
	}
}

// watch streams changes under filter after resourceVersion rv (rv 0: current objects first, as ADDED).
// Headers must not have been sent: errors before the stream starts are answered as Status.
func (s *kvSource) watch(ctx context.Context, ww func() *watchWriter, filter string, rv uint64, m matcher) error {
	_, last, err := s.streamState(ctx)
	if err != nil {
		return err
	}
	// History is 1: superseded revisions are compacted away but their key's latest message (or delete
	// marker) stays, so resuming from any older revision still converges; only a future one is refused.
	if rv > last {
		return apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", rv, last), 1)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{"$KV." + s.kv.Bucket() + "." + filter}}
	initialUpTo := uint64(0)
	if rv == 0 {
		cfg.DeliverPolicy = jetstream.DeliverLastPerSubjectPolicy
		initialUpTo = last
	} else {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = rv + 1
	}
	// Keys that exist now were created before or during the gap since rv; later first puts of other keys
	// are creations. A KV create also carries an expected last sequence of 0.
	existing := map[string]bool{}
	if rv != 0 {
		if existing, err = s.keys(ctx, filter); err != nil {
			return err
		}
	}
	out := ww()
	// The last object sent per key, so DELETED events carry it, and which keys exist for this client.
	known := map[string]runtime.Object{}
	gone := map[string]bool{} // keys deleted during this watch: a later put re-creates them
	err = consumeOrdered(ctx, s.js, s.stream(), cfg, func(msg jetstream.Msg) error {
		md, err := msg.Metadata()
		if err != nil {
			return nil
		}
		seq := md.Sequence.Stream
		key := strings.TrimPrefix(msg.Subject(), "$KV."+s.kv.Bucket()+".")
		switch msg.Headers().Get("KV-Operation") {
		case "DEL", "PURGE":
			prev, ok := known[key]
			delete(known, key)
			gone[key] = true
			if seq <= initialUpTo {
				return nil
			}
			if !ok {
				prev = s.tombstone(key, seq)
			}
			s.ki.meta(prev).ResourceVersion = fmt.Sprint(seq)
			if !m.matches(s.ki, prev) {
				return nil
			}
			return out.send(watchDeleted, prev)
		}
		o, err := s.decode(key, msg.Data(), seq)
		if err != nil {
			metrics.Count("admission.watch.malformed", 1)
			return nil
		}
		_, seen := known[key]
		typ := watchModified
		created := gone[key] || !existing[key] || msg.Headers().Get("Nats-Expected-Last-Subject-Sequence") == "0"
		if seq <= initialUpTo || !seen && created {
			typ = watchAdded
		}
		known[key] = o
		delete(gone, key)
		if !m.matches(s.ki, o) {
			return nil
		}
		return out.send(typ, o)
	})
	if err != nil {
		out.sendError(err)
	}
	return nil
}

// keys lists the keys under filter.
func (s *kvSource) keys(ctx context.Context, filter string) (map[string]bool, error) {
	out := map[string]bool{}
	kl, err := s.kv.ListKeysFiltered(ctx, filter)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", s.kv.Bucket(), err)
	}
	defer func() { _ = kl.Stop() }()
	for k := range kl.Keys() {
		out[k] = true
	}
	return out, nil
}
