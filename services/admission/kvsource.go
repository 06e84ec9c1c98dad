package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/metrics"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
)

// kvSource reads one KV bucket as a Kubernetes resource: resourceVersion = KV revision, a list's
// resourceVersion = the bucket stream's last sequence. Lists and watches are the watch cache's; a list
// reads the bucket only when the cache lags behind it.
type kvSource struct {
	kv jetstream.KeyValue
	ki *kind
	// decode turns a stored value into the API object, with resourceVersion rev.
	decode func(key string, value []byte, rev uint64) (runtime.Object, error)
	// reads counts the reads of the bucket's objects (nil: not counted).
	reads *atomic.Int64
}

func (s *kvSource) count() {
	if s.reads != nil {
		s.reads.Add(1)
	}
}

// get reads one object; a 404 Status when absent.
func (s *kvSource) get(ctx context.Context, key, name string) (runtime.Object, uint64, error) {
	s.count()
	data, rev, err := bus.GetEncoded(ctx, s.kv, key)
	if errors.Is(err, bus.ErrNotFound) {
		return nil, 0, apierrors.NewNotFound(s.ki.gr(), name)
	}
	if err != nil {
		return nil, 0, err
	}
	o, err := s.decode(key, data, rev)
	if err != nil {
		return nil, 0, err
	}
	return o, rev, nil
}

// list reads the current values under filter (a key pattern) that match m, as of the revision it returns.
// A key written while the watch reads the initial values may come twice, its value then and its change
// (nats.go places the end of the initial values from pending counts that writes move): the later entry
// stands, so a list holds each key once. The bucket's watch holds that end until its fence has come
// (see bus.Bucket.Watch), so no value is missing.
func (s *kvSource) list(ctx context.Context, filter string, m matcher) ([]runtime.Object, uint64, error) {
	s.count()
	last, err := bus.StoreRevision(ctx, s.kv)
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
	at := map[string]int{} // key → its object's index in out
	set := func(key string, o runtime.Object) {
		i, ok := at[key]
		switch {
		case ok:
			out[i] = o
		case o != nil:
			at[key] = len(out)
			out = append(out, o)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return nil, 0, err
				}
				return nil, 0, fmt.Errorf("list %s: %w", s.kv.Bucket(), bus.ErrWatchEnded) // a partial list is no list
			}
			if e == nil {
				return slices.DeleteFunc(out, func(o runtime.Object) bool { return o == nil }), rv, nil
			}
			rv = max(rv, e.Revision())
			if e.Operation() != jetstream.KeyValuePut {
				set(e.Key(), nil)
				continue
			}
			o, err := s.decode(e.Key(), e.Value(), e.Revision())
			if err != nil {
				metrics.Count("admission.list.malformed", 1)
				set(e.Key(), nil)
				continue
			}
			if !m.matches(s.ki, o) {
				o = nil
			}
			set(e.Key(), o)
		}
	}
}
