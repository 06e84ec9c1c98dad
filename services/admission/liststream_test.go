package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/internal/podtest"
)

// podCache is a ready watch cache of n running pods (podtest.RunningPod) in 20 namespaces.
func podCache(t testing.TB, n int) *watchCache {
	t.Helper()
	entries, _ := podtest.Entries(n)
	initial := newWatchCache(podKind, nil, 1, time.Hour, nil)
	for _, e := range entries {
		initial.apply(e.Key(), e.Operation(), e.Value(), e.Revision())
	}
	c := newWatchCache(podKind, nil, 0, 0, nil)
	c.replace(initial, uint64(n))
	if c.len() != n {
		t.Fatalf("cache holds %d of %d pods", c.len(), n)
	}
	return c
}

// oldList is a list answered the way it was before lists were streamed: every object decoded and
// collected, sorted, then one json.Marshal of the whole list or Table.
func oldList(t *testing.T, c *watchCache, req request, sel selection) []byte {
	t.Helper()
	items, rv := c.state()
	lo, hi := c.span(items, sel)
	if cont := req.q.Get("continue"); cont != "" {
		var ns, name string
		var err error
		if rv, ns, name, err = decodeContinue(cont, c.ki.namespaced); err != nil {
			t.Fatal(err)
		}
		lo = max(lo, after(items, ns, name))
	}
	limit, _ := strconv.Atoi(req.q.Get("limit"))
	var objs []runtime.Object
	var last *cacheEntry
	i := lo
	for ; i < hi && (limit == 0 || len(objs) < limit); i++ {
		e := items[i]
		if !c.matches(sel, e) {
			continue
		}
		o, err := c.decode(e, e.rev)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
		last = e
	}
	meta := metav1.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
	if i < hi && last != nil {
		meta.Continue = encodeContinue(rv, last, c.ki.namespaced)
		if sel.m.label.Empty() && sel.m.field.Empty() {
			n := int64(hi - i)
			meta.RemainingItemCount = &n
		}
	}
	return oldListJSON(t, req, c.ki, objs, meta)
}

// oldListJSON is writeListMeta's body as it was: sorted objects in one genericList or Table.
func oldListJSON(t *testing.T, req request, ki *kind, objs []runtime.Object, meta metav1.ListMeta) []byte {
	t.Helper()
	objs = slices.Clone(objs)
	slices.SortStableFunc(objs, ki.byNamespaceName)
	var v any
	if req.table != nil {
		tb := newTable(ki.tableColumns(), meta.ResourceVersion)
		tb.Continue, tb.RemainingItemCount = meta.Continue, meta.RemainingItemCount
		for _, o := range objs {
			tb.Rows = append(tb.Rows, req.table.row(ki.row(o), o, ki.meta(o)))
		}
		v = tb
	} else {
		if objs == nil {
			objs = []runtime.Object{}
		}
		v = genericList{TypeMeta: metav1.TypeMeta{Kind: ki.listKind(), APIVersion: ki.apiVersion()}, Metadata: meta, Items: objs}
	}
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

// A streamed list, page after page, is byte for byte the list json.Marshal gave: objects and Tables,
// all of it or in pages, empty, and selected by namespace, labels and fields.
func TestStreamedListIsMarshaledList(t *testing.T) {
	c := podCache(t, 240)
	tests := []struct {
		name  string
		ns    string
		query string
		table metav1.IncludeObjectPolicy // "": objects
		pages int
	}{
		{name: "objects", pages: 1},
		{name: "objects paged", query: "limit=50", pages: 5},
		{name: "objects limit over all", query: "limit=1000", pages: 1},
		{name: "table", table: metav1.IncludeMetadata, pages: 1},
		{name: "table paged", query: "limit=100", table: metav1.IncludeMetadata, pages: 3},
		{name: "table without objects", query: "limit=7", table: metav1.IncludeNone, pages: 35},
		{name: "table with objects", table: metav1.IncludeObject, pages: 1},
		{name: "namespace", ns: "team-3", pages: 1},
		{name: "namespace paged", ns: "team-3", query: "limit=5", table: metav1.IncludeMetadata, pages: 3},
		{name: "empty", ns: "nobody", pages: 1},
		{name: "empty table", ns: "nobody", table: metav1.IncludeMetadata, pages: 1},
		{name: "empty page limit", ns: "nobody", query: "limit=5", pages: 1},
		{name: "labels", query: "labelSelector=app%3Dweb-7", pages: 1},
		{name: "labels paged", query: "labelSelector=app+in+(web-7,web-9)&limit=1", pages: 6},
		{name: "labels table none", query: "labelSelector=app%3Dnone", table: metav1.IncludeMetadata, pages: 1},
		{name: "fields", query: "fieldSelector=spec.nodeName%3Dnode-0042", table: metav1.IncludeMetadata, pages: 1},
		{name: "name", ns: "team-0", query: "fieldSelector=metadata.name%3Dweb-0-7d9f8c6b5-00000", pages: 1},
		{name: "resourceVersion 0 paged", query: "resourceVersion=0&limit=120", pages: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			pages := 0
			for {
				req := request{kind: podKind, ns: tt.ns, q: q}
				if tt.table != "" {
					req.table = &tableOptions{includeObject: tt.table}
				}
				m, err := newMatcher(q, podKind)
				if err != nil {
					t.Fatal(err)
				}
				sel := selectionOf(req, m)
				w := httptest.NewRecorder()
				if err := (&Service{}).listCached(context.Background(), w, req, c, sel); err != nil {
					t.Fatal(err)
				}
				want := oldList(t, c, req, sel)
				if got := w.Body.Bytes(); !bytes.Equal(got, want) {
					t.Fatalf("page %d (%s):\n got %.400s\nwant %.400s", pages, q.Encode(), got, want)
				}
				if ct := w.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q", ct)
				}
				wantLen := ""
				if len(want) <= listBufferSize {
					wantLen = strconv.Itoa(len(want))
				}
				if cl := w.Header().Get("Content-Length"); cl != wantLen {
					t.Errorf("Content-Length = %q for %d bytes, want %q", cl, len(want), wantLen)
				}
				pages++
				var page struct {
					Metadata metav1.ListMeta `json:"metadata"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
					t.Fatal(err)
				}
				if page.Metadata.Continue == "" {
					break
				}
				q = url.Values{"continue": {page.Metadata.Continue}, "limit": q["limit"],
					"labelSelector": q["labelSelector"], "fieldSelector": q["fieldSelector"]}
			}
			if pages != tt.pages {
				t.Errorf("%d pages, want %d", pages, tt.pages)
			}
		})
	}
}

// Lists that are not served by a cache stream too, sorted as before.
func TestWriteListIsMarshaledList(t *testing.T) {
	c := podCache(t, 60)
	items, _ := c.state()
	objs := decodeAll(t, c, items)
	rand.Shuffle(len(objs), func(i, j int) { objs[i], objs[j] = objs[j], objs[i] })
	for _, table := range []*tableOptions{nil, {includeObject: metav1.IncludeMetadata}} {
		for _, objs := range [][]runtime.Object{nil, objs} {
			req := request{kind: podKind, table: table}
			want := oldListJSON(t, req, podKind, objs, metav1.ListMeta{ResourceVersion: "60"})
			w := httptest.NewRecorder()
			writeList(w, req, podKind, slices.Clone(objs), 60)
			if got := w.Body.Bytes(); w.Code != http.StatusOK || !bytes.Equal(got, want) {
				t.Fatalf("table %v, %d objects: %d\n got %.300s\nwant %.300s", table != nil, len(objs), w.Code, got, want)
			}
		}
	}
}

// A list that fails before any of it was sent is still a Status; one that fails later is cut short,
// and the client sees a broken answer. A client that goes away ends the list; the request's deadline
// does not.
func TestStreamedListFailures(t *testing.T) {
	tests := []struct {
		name    string
		corrupt int // index of the entry that no longer decodes; -1: none
		ctx     func() (context.Context, context.CancelFunc)
		cut     bool // the error wraps errListCut, and part of the list was written
	}{
		{name: "first decode fails", corrupt: 0},
		{name: "late decode fails", corrupt: 150, cut: true},
		{name: "client gone", corrupt: -1, ctx: func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := podCache(t, 200)
			if tt.corrupt >= 0 {
				items, _ := c.state()
				items[tt.corrupt].data = []byte{0xff, 0xff, 0xff}
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			req := request{kind: podKind, q: url.Values{}}
			w := httptest.NewRecorder()
			err := (&Service{}).listCached(ctx, w, req, c, selectionOf(req, everything()))
			if err == nil {
				t.Fatal("the list did not fail")
			}
			if cut := errors.Is(err, errListCut); cut != tt.cut {
				t.Fatalf("err = %v, cut short: %v, want %v", err, cut, tt.cut)
			}
			if sent := w.Body.Len() > 0; sent != tt.cut {
				t.Errorf("%d bytes sent before %v", w.Body.Len(), err)
			}
			if !tt.cut && tt.corrupt >= 0 && statusOf(err).Code != http.StatusInternalServerError {
				t.Errorf("status %+v, want 500", statusOf(err))
			}
		})
	}
}

// A request whose deadline passes while its list is written gets the whole list.
func TestStreamedListOutlivesDeadline(t *testing.T) {
	c := podCache(t, 100)
	items, rv := c.state()
	objs := decodeAll(t, c, items)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	req := request{kind: podKind}
	meta := metav1.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
	w := httptest.NewRecorder()
	if err := streamList(ctx, w, req, podKind, meta, objectsOf(objs)); err != nil {
		t.Fatal(err)
	}
	if want := oldListJSON(t, req, podKind, objs, meta); !bytes.Equal(w.Body.Bytes(), want) {
		t.Errorf("got %d bytes, want %d", w.Body.Len(), len(want))
	}
}

// A list cut short reaches the client as a broken answer, not as a shorter list.
func TestCutListBreaksAnswer(t *testing.T) {
	c := podCache(t, 200)
	items, _ := c.state()
	items[150].data = []byte{0xff, 0xff, 0xff}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := request{kind: podKind, q: url.Values{}}
		if err := (&Service{}).listCached(r.Context(), w, req, c, selectionOf(req, everything())); err != nil {
			answerListError(w, err)
		}
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("read a whole answer of %d bytes from a list cut short", len(data))
	}
}

// decodeAll decodes the cache's entries as a list answers them.
func decodeAll(t *testing.T, c *watchCache, items []*cacheEntry) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, e := range items {
		o, err := c.decode(e, e.rev)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}

// listRequest is a list of pods with query q, as a Table when table, and what it selects.
func listRequest(tb testing.TB, q url.Values, table bool) (request, selection) {
	tb.Helper()
	req := request{kind: podKind, q: q}
	if table {
		req.table = &tableOptions{includeObject: metav1.IncludeMetadata}
	}
	m, err := newMatcher(q, podKind)
	if err != nil {
		tb.Fatal(err)
	}
	return req, selectionOf(req, m)
}
