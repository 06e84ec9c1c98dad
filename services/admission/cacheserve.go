package admission

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/podbus/podbus/internal/metrics"
)

// Lists and watches of a KV-backed kind are served from its watch cache, as kube-apiserver serves them:
//
//	list, resourceVersion unset   consistent: once the cache has seen the store's latest revision
//	list, resourceVersion=0       whatever the cache holds
//	list, resourceVersion=N       not older than N (504 if the store has not reached N)
//	list, limit and continue      pages in key order, every page at the first page's resourceVersion;
//	                              a token whose state the cache no longer keeps is 410 Expired
//	watch, resourceVersion unset  the current state as ADDED events, then the changes
//	  or 0 (or sendInitialEvents)
//	watch, resourceVersion=N      the changes after N; 410 Expired if the cache no longer holds them all

// cache returns k's watch cache, starting it on first use.
func (s *Service) cache(k *kind) *watchCache {
	name := k.storage.spec.Name
	s.cachesMu.Lock()
	defer s.cachesMu.Unlock()
	if c := s.caches[name]; c != nil {
		return c
	}
	c := newWatchCache(k, s.buckets[name], s.cfg.cacheEvents, s.cfg.bookmarkEvery, s.log)
	s.caches[name] = c
	go c.run(s.ctx)
	return c
}

// selectionOf is what a list or watch of req selects.
func selectionOf(req request, m matcher) selection {
	name := req.name
	if name == "" {
		name = m.fieldValue("metadata.name")
	}
	return selection{ns: req.ns, name: name, m: m}
}

func (s *Service) listOrWatchCached(w http.ResponseWriter, r *http.Request, req request) {
	k := req.kind
	m, err := newMatcher(req.q, k)
	if err != nil {
		writeStatus(w, err)
		return
	}
	sel := selectionOf(req, m)
	c := s.cache(k)
	if req.watch {
		s.watchCached(w, r, req, c, sel)
		return
	}
	if err := s.listCached(r.Context(), w, req, c, sel); errors.Is(err, errNotFresh) {
		// The cache lags the store: read the bucket, unpaged, rather than answer stale.
		metrics.Count("admission.watchcache.list_fallbacks", 1)
		filter := k.keyFilter(req.ns)
		if sel.name != "" && (req.ns != "" || !k.namespaced) {
			filter = k.key(req.ns, sel.name)
		}
		objs, rv, err := s.source(k).list(r.Context(), filter, m)
		if err != nil {
			writeStatus(w, err)
			return
		}
		writeList(w, req, k, objs, rv)
	} else if err != nil {
		answerListError(w, err)
	}
}

// continueToken is a list's continue parameter: base64 of this JSON, as kube-apiserver's.
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	// StartKey is the key to continue from: the last listed object's namespace/name and a NUL byte.
	StartKey string `json:"start"`
}

func encodeContinue(rv uint64, e *cacheEntry, namespaced bool) string {
	start := e.name
	if namespaced {
		start = e.ns + "/" + e.name
	}
	data, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", ResourceVersion: int64(rv), StartKey: start + "\x00"})
	return base64.RawURLEncoding.EncodeToString(data)
}

// decodeContinue returns the resourceVersion and the namespace and name of the last object listed.
func decodeContinue(tok string, namespaced bool) (rv uint64, ns, name string, err error) {
	data, err := base64.RawURLEncoding.DecodeString(tok)
	var ct continueToken
	if err == nil {
		err = json.Unmarshal(data, &ct)
	}
	switch {
	case err != nil:
		return 0, "", "", badRequest("continue key is not valid: %v", err)
	case ct.APIVersion != "meta.k8s.io/v1":
		return 0, "", "", badRequest("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1 required)")
	case ct.ResourceVersion <= 0:
		return 0, "", "", badRequest("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1 required)")
	}
	key := strings.TrimSuffix(ct.StartKey, "\x00")
	if namespaced {
		var ok bool
		if ns, name, ok = strings.Cut(key, "/"); !ok {
			return 0, "", "", badRequest("continue key is not valid: no namespace in %q", key)
		}
		return uint64(ct.ResourceVersion), ns, name, nil
	}
	return uint64(ct.ResourceVersion), "", key, nil
}

// errContinueExpired is kube-apiserver's answer to a continue token older than what it can serve.
func errContinueExpired() error {
	return apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter.")
}

// listCached answers a list from the cache; errNotFresh when the cache could not catch up with the store,
// an error wrapping errListCut when it failed after part of the answer was sent.
func (s *Service) listCached(ctx context.Context, w http.ResponseWriter, req request, c *watchCache, sel selection) error {
	q := req.q
	var limit int
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return badRequest("invalid limit %q", v)
		}
		limit = int(min(n, int64(1<<30)))
	}
	rvParam := q.Get("resourceVersion")
	var items []*cacheEntry
	var rv uint64
	var startNS, startName string
	cont := q.Get("continue")
	if cont != "" {
		if rvParam != "" {
			return badRequest("specifying resource version is not allowed when using continue")
		}
		var err error
		if rv, startNS, startName, err = decodeContinue(cont, c.ki.namespaced); err != nil {
			return err
		}
		if err := c.waitReady(ctx); err != nil {
			return err
		}
		var ok bool
		if items, ok = c.stateAt(rv); !ok {
			return errContinueExpired()
		}
	} else {
		want, err := parseRV(rvParam)
		if err != nil {
			return err
		}
		match := q.Get("resourceVersionMatch")
		switch {
		case match != "" && match != string(metav1.ResourceVersionMatchNotOlderThan) && match != string(metav1.ResourceVersionMatchExact):
			return badRequest("invalid resourceVersionMatch %q", match)
		case match != "" && want == 0:
			return badRequest("resourceVersionMatch is forbidden unless resourceVersion is provided and not 0")
		case rvParam == "":
			err = c.fresh(ctx)
		case want == 0:
			err = c.waitReady(ctx)
		default:
			err = c.atLeast(ctx, want)
		}
		if err != nil {
			return err
		}
		if match == string(metav1.ResourceVersionMatchExact) {
			var ok bool
			if items, ok = c.stateAt(want); !ok {
				return expired(want, c.oldestRV()+1)
			}
			rv = want
		} else {
			items, rv = c.state()
		}
	}
	lo, hi := c.span(items, sel)
	if cont != "" {
		lo = max(lo, after(items, startNS, startName))
	}
	// The entries are in (namespace, name) order, the order of every list: the page is found first,
	// for its metadata comes before its items, then its entries are decoded one at a time as they are
	// written.
	var page []*cacheEntry
	i := lo
	for ; i < hi && (limit == 0 || len(page) < limit); i++ {
		if e := items[i]; c.matches(sel, e) {
			page = append(page, e)
		}
	}
	meta := metav1.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
	if i < hi && len(page) > 0 {
		c.keep(rv, items)
		meta.Continue = encodeContinue(rv, page[len(page)-1], c.ki.namespaced)
		if sel.m.label.Empty() && sel.m.field.Empty() {
			n := int64(hi - i)
			meta.RemainingItemCount = &n
		}
	}
	next := func() (runtime.Object, error) {
		if len(page) == 0 {
			return nil, nil
		}
		e := page[0]
		page = page[1:]
		return c.decode(e, e.rev)
	}
	return streamList(ctx, w, req, c.ki, meta, next)
}

func (c *watchCache) oldestRV() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.oldest
}

// watchCached streams a watch from the cache.
func (s *Service) watchCached(w http.ResponseWriter, r *http.Request, req request, c *watchCache, sel selection) {
	q := req.q
	rvParam := q.Get("resourceVersion")
	from, err := parseRV(rvParam)
	if err != nil {
		writeStatus(w, err)
		return
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	sendInitial := q.Get("sendInitialEvents") == "true"
	initial := from == 0 || sendInitial
	ctx, cancel := watchContext(r, req)
	defer cancel()
	switch {
	case rvParam == "":
		err = c.fresh(ctx)
		if errors.Is(err, errNotFresh) && c.isReady() {
			err = nil // a watch converges: start from what the cache holds
		}
	case from == 0:
		err = c.waitReady(ctx)
	default:
		err = c.atLeast(ctx, from)
	}
	if errors.Is(err, errNotFresh) {
		err = apierrors.NewTimeoutError("the watch cache is not ready", 1)
	}
	if err != nil {
		writeStatus(w, err)
		return
	}
	cw, state, backlog, at, err := c.register(sel, from, initial, bookmarks)
	ww := startWatch(w, req, c.ki)
	if err != nil {
		ww.sendError(err)
		return
	}
	defer c.stop(cw)
	lo, hi := c.span(state, sel)
	for _, e := range state[lo:hi] {
		if !c.matches(sel, e) {
			continue
		}
		if err := sendItem(ww, c, watchItem{ev: &cacheEvent{rev: e.rev, cur: e}, typ: watchAdded}); err != nil {
			return
		}
	}
	if sendInitial && bookmarks {
		if err := ww.bookmark(at, true); err != nil {
			return
		}
	}
	for _, it := range backlog {
		if err := sendItem(ww, c, it); err != nil {
			return
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case it, ok := <-cw.ch:
			if !ok {
				return
			}
			if err := sendItem(ww, c, it); err != nil {
				return
			}
		}
	}
}

// sendItem writes one event; watchers without a Table share its encoding.
func sendItem(ww *watchWriter, c *watchCache, it watchItem) error {
	ev := it.ev
	if it.typ == watchBookmark {
		return ww.bookmark(ev.rev, false)
	}
	if ww.table != nil {
		o, err := c.decode(ev.object(), ev.rev)
		if err != nil {
			return err
		}
		return ww.send(it.typ, o)
	}
	ev.once.Do(func() {
		var o runtime.Object
		if o, ev.err = c.decode(ev.object(), ev.rev); ev.err == nil {
			ev.encoded, ev.err = json.Marshal(o)
		}
	})
	if ev.err != nil {
		return fmt.Errorf("encode watch event: %w", ev.err)
	}
	return ww.write(it.typ, ev.encoded)
}
