package admission

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Lists are written as they are read, one item at a time, as kube-apiserver streams its list encoding:
// the envelope, then each object (or Table row) decoded, encoded and written before the next is
// decoded, so a list of every pod never holds all the pods, nor the whole body, at once. The bytes are
// those json.Marshal gives for the whole list.
//
// An answer that fits in the buffer is sent with its Content-Length, a longer one chunked. The status
// is committed with the first bytes sent, once the buffer first fills: a failure before that is still
// a Status; one after it cuts the answer short (errListCut), and the handler aborts the connection so
// that the client sees a broken answer, not a shorter list.

// listBufferSize is how much of a list is gathered before it is written.
const listBufferSize = 32 << 10

// errListCut: a list failed after part of it was sent; no Status can replace it any more.
var errListCut = errors.New("list answer cut short")

// nextObject returns a list's next object, nil after the last.
type nextObject func() (runtime.Object, error)

// objectsOf yields objs in order.
func objectsOf(objs []runtime.Object) nextObject {
	return func() (runtime.Object, error) {
		if len(objs) == 0 {
			return nil, nil
		}
		o := objs[0]
		objs = objs[1:]
		return o, nil
	}
}

// streamList answers the objects next yields as a list, or a Table when req asks for one, with meta.
// It stops when the client goes away; the request's own deadline does not cut a list it has started.
func streamList(ctx context.Context, w http.ResponseWriter, req request, ki *kind, meta metav1.ListMeta, next nextObject) error {
	head, err := listHead(req, ki, meta)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("encode response: %w", err))
	}
	sw := &sentWriter{w: w}
	bw := bufio.NewWriterSize(sw, listBufferSize)
	fail := func(err error) error {
		if err != nil && sw.sent {
			return fmt.Errorf("%w: %w", errListCut, err)
		}
		return err
	}
	_, _ = bw.Write(head)
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil && !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return fail(err)
		}
		o, err := next()
		if err != nil {
			return fail(apierrors.NewInternalError(err))
		}
		if o == nil {
			break
		}
		data, err := encodeItem(req, ki, o)
		if err != nil {
			return fail(apierrors.NewInternalError(fmt.Errorf("encode response: %w", err)))
		}
		if i > 0 {
			_ = bw.WriteByte(',')
		}
		if _, err := bw.Write(data); err != nil {
			return fail(err)
		}
	}
	_, _ = bw.WriteString("]}\n")
	if !sw.sent {
		// The whole answer is in the buffer: it goes with its length, as one marshaled at once did.
		w.Header().Set("Content-Length", strconv.Itoa(bw.Buffered()))
	}
	return fail(bw.Flush())
}

// listHead is the list's JSON up to its first item: the envelope json.Marshal gives an empty list,
// without the closing "]}".
func listHead(req request, ki *kind, meta metav1.ListMeta) ([]byte, error) {
	var envelope any
	if req.table != nil {
		t := newTable(ki.tableColumns(), meta.ResourceVersion)
		t.Continue, t.RemainingItemCount = meta.Continue, meta.RemainingItemCount
		envelope = t
	} else {
		envelope = genericList{
			TypeMeta: metav1.TypeMeta{Kind: ki.listKind(), APIVersion: ki.apiVersion()},
			Metadata: meta,
			Items:    []runtime.Object{},
		}
	}
	data, err := json.Marshal(envelope)
	if err != nil {
		return nil, err
	}
	head, ok := bytes.CutSuffix(data, []byte("]}"))
	if !ok || !bytes.HasSuffix(head, []byte("[")) {
		return nil, fmt.Errorf("a list's envelope ends with %q", data[max(0, len(data)-8):])
	}
	return head, nil
}

// encodeItem is one item of the list: the object, or its Table row.
func encodeItem(req request, ki *kind, o runtime.Object) ([]byte, error) {
	if req.table == nil {
		return json.Marshal(o)
	}
	row := req.table.row(ki.row(o), o, ki.meta(o))
	// A pointer, as the row would be inside the Table's slice: fields marshal alike either way.
	return json.Marshal(&row)
}

// sentWriter writes to an answer and remembers whether any of it reached the client.
type sentWriter struct {
	w    http.ResponseWriter
	sent bool
}

func (s *sentWriter) Write(p []byte) (int, error) {
	if !s.sent {
		s.w.Header().Set("Content-Type", "application/json")
	}
	n, err := s.w.Write(p)
	if n > 0 || err == nil {
		s.sent = true
	}
	return n, err
}

// answerListError answers a list's failure: a Status while nothing was sent, else a broken answer.
func answerListError(w http.ResponseWriter, err error) {
	if errors.Is(err, errListCut) {
		panic(http.ErrAbortHandler)
	}
	writeStatus(w, err)
}
