package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Watches are newline-delimited JSON WatchEvents, flushed one by one. Objects are Tables (one row,
// column definitions in the first event only, as kube-apiserver does) when the client asked for them.

const (
	watchAdded    = "ADDED"
	watchModified = "MODIFIED"
	watchDeleted  = "DELETED"
	watchError    = "ERROR"
	// maxWatchTimeout bounds a watch without timeoutSeconds; clients re-watch from the last version.
	maxWatchTimeout = 30 * time.Minute
)

type watchWriter struct {
	w        http.ResponseWriter
	flusher  http.Flusher
	ki       *kind
	table    *tableOptions
	sentCols bool
}

// startWatch sends the response headers; the stream of events follows.
func startWatch(w http.ResponseWriter, req request, ki *kind) *watchWriter {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	ww := &watchWriter{w: w, flusher: f, ki: ki, table: req.table}
	ww.flush()
	return ww
}

func (ww *watchWriter) flush() {
	if ww.flusher != nil {
		ww.flusher.Flush()
	}
}

// send writes one event.
func (ww *watchWriter) send(typ string, o runtime.Object) error {
	var payload any = o
	if ww.table != nil {
		cols := ww.ki.tableColumns()
		if ww.sentCols {
			cols = nil
		}
		t := newTable(cols, ww.ki.meta(o).ResourceVersion)
		t.Rows = append(t.Rows, ww.table.row(ww.ki.row(o), o, ww.ki.meta(o)))
		ww.sentCols = true
		payload = t
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encode watch event: %w", err)
	}
	return ww.write(typ, raw)
}

func (ww *watchWriter) write(typ string, raw []byte) error {
	data, err := json.Marshal(metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}})
	if err != nil {
		return err
	}
	if _, err := ww.w.Write(append(data, '\n')); err != nil {
		return err
	}
	ww.flush()
	return nil
}

// bookmark writes a BOOKMARK: an empty object of the kind at resourceVersion rv; initialEnd marks the
// end of the initial events a watch asked for (sendInitialEvents).
func (ww *watchWriter) bookmark(rv uint64, initialEnd bool) error {
	o := ww.ki.newObject()
	ww.ki.stamp(o, 0)
	m := objectMeta(o)
	m.ResourceVersion = strconv.FormatUint(rv, 10)
	if initialEnd {
		m.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	raw, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode bookmark: %w", err)
	}
	return ww.write(watchBookmark, raw)
}

// sendError writes an ERROR event carrying a Status; the watch ends after it.
func (ww *watchWriter) sendError(err error) {
	st := statusOf(err)
	raw, _ := json.Marshal(st)
	_ = ww.write(watchError, raw)
}

// watchContext bounds a watch by the request and timeoutSeconds.
func watchContext(r *http.Request, req request) (context.Context, context.CancelFunc) {
	timeout := maxWatchTimeout
	if s := req.q.Get("timeoutSeconds"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 && time.Duration(n)*time.Second < timeout {
			timeout = time.Duration(n) * time.Second
		}
	}
	return context.WithTimeout(r.Context(), timeout)
}

// expired is the 410 a watch gets when its resourceVersion is older than what the stream holds.
func expired(rv, first uint64) error {
	return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, first-1))
}

// consumeOrdered runs fn for each message of an ordered consumer until ctx ends or fn fails.
func consumeOrdered(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig, fn func(jetstream.Msg) error) error {
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("ordered consumer on %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("consume %s: %w", stream, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("consume %s: %w", stream, err)
		}
		if err := fn(msg); err != nil {
			return err
		}
	}
}
