package admission

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// smallPod is a stored pod as the store writes it, with labels app=<app>.
func smallPod(ns, name, app string) *pb.Pod {
	return &pb.Pod{
		Metadata: &pb.ObjectMeta{Name: name, Namespace: ns, Uid: "uid-" + ns + "-" + name, Labels: map[string]string{"app": app}},
		Spec:     &pb.PodSpec{Containers: []*pb.Container{{Name: "c", Image: "nginx"}}},
		Status:   &pb.PodStatus{Phase: "Pending"},
	}
}

// putPods writes pods name-0000 … straight into the pods bucket, as the store would, and returns the
// revision of the last one.
func (e *env) putPods(ns, prefix, app string, n int) uint64 {
	e.t.Helper()
	ctx := context.Background()
	var futures []jetstream.PubAckFuture
	for i := range n {
		name := fmt.Sprintf("%s-%04d", prefix, i)
		f, err := e.conn.JS.PublishAsync("$KV."+bus.BucketPods+"."+bus.PodKey(ns, name), mustMarshal(e.t, smallPod(ns, name, app)))
		if err != nil {
			e.t.Fatal(err)
		}
		futures = append(futures, f)
	}
	var last uint64
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			last = max(last, ack.Sequence)
		case err := <-f.Err():
			e.t.Fatal(err)
		case <-ctx.Done():
		}
	}
	return last
}

// putPod writes one pod straight into the pods bucket and returns its revision.
func (e *env) putPod(ns, name, app string) uint64 {
	e.t.Helper()
	kv, err := e.conn.JS.KeyValue(context.Background(), bus.BucketPods)
	if err != nil {
		e.t.Fatal(err)
	}
	rev, err := kv.Put(context.Background(), bus.PodKey(ns, name), mustMarshal(e.t, smallPod(ns, name, app)))
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

type listPage struct {
	Kind     string
	Metadata metav1.ListMeta
	Items    []struct{ Metadata metav1.ObjectMeta }
	Rows     []struct {
		Cells []any
	}
}

func (e *env) listPage(path string, headers ...string) (int, listPage, []byte) {
	e.t.Helper()
	resp, data := e.do("GET", path, "", headers...)
	var p listPage
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(data, &p); err != nil {
			e.t.Fatalf("%s: %v", path, err)
		}
		if p.Kind == "Table" {
			for _, r := range p.Rows {
				var it struct{ Metadata metav1.ObjectMeta }
				it.Metadata.Name, _ = r.Cells[0].(string)
				p.Items = append(p.Items, it)
			}
		}
	}
	return resp.StatusCode, p, data
}

// Paging through 1,200 pods 500 at a time returns each exactly once, in key order, in 3 pages at the
// first page's resourceVersion, whatever changes in between.
func TestListPaging(t *testing.T) {
	e := start(t, nil, true)
	e.putPods("default", "p", "web", 1200)
	e.putPods("zz", "q", "web", 3)
	tests := []struct {
		name      string
		path      string
		headers   []string
		want      int
		pages     int
		remaining int64 // remainingItemCount of the first page; 0: none
	}{
		{name: "namespace", path: "/api/v1/namespaces/default/pods?limit=500", want: 1200, pages: 3, remaining: 700},
		{name: "all namespaces", path: "/api/v1/pods?limit=500", want: 1203, pages: 3, remaining: 703},
		{name: "table", path: "/api/v1/namespaces/default/pods?limit=500", headers: []string{tableAccept}, want: 1200, pages: 3, remaining: 700},
		{name: "selector", path: "/api/v1/pods?limit=500&labelSelector=app%3Dweb", want: 1203, pages: 3},
		{name: "fits one page", path: "/api/v1/namespaces/zz/pods?limit=500", want: 3, pages: 1},
		{name: "no limit", path: "/api/v1/namespaces/default/pods", want: 1200, pages: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			seen := map[string]bool{}
			rv, cont := "", ""
			pages := 0
			for {
				path := tt.path
				if cont != "" {
					path += "&continue=" + url.QueryEscape(cont)
				}
				code, p, data := e.listPage(path, tt.headers...)
				if code != 200 {
					t.Fatalf("%s = %d %s", path, code, data)
				}
				pages++
				if pages == 1 {
					rv = p.Metadata.ResourceVersion
					if r := p.Metadata.RemainingItemCount; (r == nil) != (tt.remaining == 0) || r != nil && *r != tt.remaining {
						t.Errorf("remainingItemCount = %v, want %d", r, tt.remaining)
					}
					// A change after the first page shows in none of the following ones.
					e.putPod("default", "p-1100", "web")
				} else if p.Metadata.ResourceVersion != rv {
					t.Errorf("page %d at resourceVersion %s, want the first page's %s", pages, p.Metadata.ResourceVersion, rv)
				}
				listRV, _ := strconv.ParseUint(rv, 10, 64)
				for _, it := range p.Items {
					if itemRV, _ := strconv.ParseUint(it.Metadata.ResourceVersion, 10, 64); tt.headers == nil && itemRV > listRV {
						t.Errorf("%s at %d, after the list's %d", it.Metadata.Name, itemRV, listRV)
					}
					key := it.Metadata.Namespace + "/" + it.Metadata.Name
					if seen[key] {
						t.Fatalf("%s listed twice", key)
					}
					seen[key] = true
					got = append(got, key)
				}
				if cont = p.Metadata.Continue; cont == "" {
					break
				}
			}
			if len(got) != tt.want || pages != tt.pages {
				t.Fatalf("%d items in %d pages, want %d in %d", len(got), pages, tt.want, tt.pages)
			}
			for j := 1; j < len(got); j++ {
				if tt.headers == nil && got[j-1] >= got[j] {
					t.Fatalf("item %d %s after %s: not in key order", j, got[j], got[j-1])
				}
			}
		})
	}
}

// A continue token is good while the cache keeps the state it was issued for; then it is 410 Expired.
func TestContinueExpired(t *testing.T) {
	e := start(t, func(c *Config) { c.cacheEvents = 10 }, true)
	e.putPods("default", "p", "web", 20)
	code, p, data := e.listPage("/api/v1/namespaces/default/pods?limit=5")
	if code != 200 || p.Metadata.Continue == "" {
		t.Fatalf("first page: %d %s", code, data)
	}
	tok := p.Metadata.Continue
	e.putPod("default", "a-new", "web")
	next := "/api/v1/namespaces/default/pods?limit=5&continue=" + url.QueryEscape(tok)
	if code, p, data := e.listPage(next); code != 200 || len(p.Items) != 5 || p.Items[0].Metadata.Name != "p-0005" {
		t.Fatalf("second page after one change: %d %s", code, data)
	}
	rev := e.putPods("default", "r", "web", 12) // more changes than the cache keeps
	waitCacheRV(t, e, bus.BucketPods, rev)

	tests := []struct {
		name   string
		path   string
		code   int
		reason metav1.StatusReason
	}{
		{name: "expired", path: next, code: 410, reason: metav1.StatusReasonExpired},
		{name: "garbage", path: "/api/v1/namespaces/default/pods?limit=5&continue=bm90LWpzb24", code: 400, reason: metav1.StatusReasonBadRequest},
		{name: "with resourceVersion", path: next + "&resourceVersion=5", code: 400, reason: metav1.StatusReasonBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do("GET", tt.path, "")
			st := decodeStatus(t, data)
			if resp.StatusCode != tt.code || st.Reason != tt.reason {
				t.Errorf("%d %s, want %d %s", resp.StatusCode, data, tt.code, tt.reason)
			}
		})
	}
}

// waitCacheRV polls until the bucket's watch cache has seen revision rev.
func waitCacheRV(t *testing.T, e *env, bucket string, rev uint64) *watchCache {
	t.Helper()
	e.svc.cachesMu.Lock()
	c := e.svc.caches[bucket]
	e.svc.cachesMu.Unlock()
	if c == nil {
		t.Fatalf("no watch cache for %s", bucket)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for c.currentRV() < rev {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if c.currentRV() >= rev {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("cache at %d, want %d", c.currentRV(), rev)
		}
	}
	return c
}

// Lists with selectors are answered from the cache, consistently, without reading the bucket.
func TestListFromCache(t *testing.T) {
	e := start(t, nil, true)
	e.putPods("default", "web", "web", 30)
	e.putPods("default", "db", "db", 20)
	waitCacheRV(t, e, bus.BucketPods, e.putPod("other", "x", "web"))
	reads := e.svc.kvReads.Load()
	tests := []struct {
		path string
		want int
	}{
		{"/api/v1/pods?labelSelector=app%3Dnone", 0},
		{"/api/v1/pods?labelSelector=app%3Dweb", 31},
		{"/api/v1/namespaces/default/pods?labelSelector=app+in+(web,db)", 50},
		{"/api/v1/pods?fieldSelector=metadata.namespace%3Dother", 1},
		{"/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Ddb-0003", 1},
		{"/api/v1/pods?fieldSelector=status.phase%3DRunning", 0},
		{"/api/v1/pods?resourceVersion=0&labelSelector=app%3Ddb", 20},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			code, p, data := e.listPage(tt.path)
			if code != 200 || len(p.Items) != tt.want {
				t.Errorf("%d, %d items, want %d: %.300s", code, len(p.Items), tt.want, data)
			}
		})
	}
	// Without resourceVersion a list is consistent: it waits for the cache to see what was just written.
	e.putPod("default", "fresh", "fresh")
	if _, p, data := e.listPage("/api/v1/pods?labelSelector=app%3Dfresh"); len(p.Items) != 1 {
		t.Errorf("a pod just written is not listed: %s", data)
	}
	// Nor does it list what was just deleted.
	kv, err := e.conn.JS.KeyValue(context.Background(), bus.BucketPods)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), bus.PodKey("default", "fresh")); err != nil {
		t.Fatal(err)
	}
	if _, p, data := e.listPage("/api/v1/pods?labelSelector=app%3Dfresh"); len(p.Items) != 0 {
		t.Errorf("a pod just deleted is listed: %s", data)
	}
	if n := e.svc.kvReads.Load() - reads; n != 0 {
		t.Errorf("%d reads of the bucket, want none", n)
	}
}

// watchEvents opens a watch with its own client and returns the types of its events, one by one.
func (e *env) watchEvents(ctx context.Context, client *http.Client, path string) (<-chan string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", e.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return nil, fmt.Errorf("watch %s: %d", path, resp.StatusCode)
	}
	out := make(chan string, 16)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev struct{ Type string }
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				return
			}
			select {
			case out <- ev.Type:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// A watch resumes from a resourceVersion the cache still holds, with exactly the changes after it; an
// older one is 410 Expired.
func TestWatchResume(t *testing.T) {
	e := start(t, func(c *Config) { c.cacheEvents = 5 }, true)
	waitCacheRV(t, e, bus.BucketPods, 0) // the changes below are the ring's, not the initial state
	var revs []uint64
	for i := range 10 {
		revs = append(revs, e.putPod("default", fmt.Sprintf("p%d", i), "web"))
	}
	waitCacheRV(t, e, bus.BucketPods, revs[9])
	tests := []struct {
		name string
		from uint64
		want []string // TYPE name
	}{
		{name: "recent", from: revs[6], want: []string{"ADDED p7", "ADDED p8", "ADDED p9", "MODIFIED p0"}},
		{name: "newest", from: revs[9], want: []string{"MODIFIED p0"}},
		{name: "too old", from: revs[1], want: []string{fmt.Sprintf("ERROR 410 Expired too old resource version: %d (%d)", revs[1], revs[4])}},
	}
	streams := make([]func() (string, map[string]any), len(tests))
	for i, tt := range tests {
		streams[i], _ = e.watchStream(fmt.Sprintf("/api/v1/namespaces/default/pods?watch=true&resourceVersion=%d", tt.from))
	}
	e.putPod("default", "p0", "changed")
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, w := range tt.want {
				typ, obj := streams[i]()
				got := typ + " " + fmt.Sprint(get(obj, "metadata", "name"))
				if typ == "ERROR" {
					got = fmt.Sprintf("ERROR %v %v %v", get(obj, "code"), get(obj, "reason"), get(obj, "message"))
				}
				if got != w {
					t.Fatalf("event %q, want %q", got, w)
				}
			}
			if tt.name == "too old" {
				if typ, _ := streams[i](); typ != "" {
					t.Errorf("the watch went on after its ERROR: %s", typ)
				}
			}
		})
	}
}

// allowWatchBookmarks gets BOOKMARKs at the cache's resourceVersion; sendInitialEvents ends the initial
// state with one.
func TestWatchBookmarks(t *testing.T) {
	e := start(t, func(c *Config) { c.bookmarkEvery = 20 * time.Millisecond }, true)
	rev := e.putPods("default", "p", "web", 3)
	waitCacheRV(t, e, bus.BucketPods, rev)
	tests := []struct {
		name string
		path string
		want []string // TYPE, then the bookmark's resourceVersion and initial-events-end annotation
	}{
		{name: "periodic", path: "/api/v1/namespaces/default/pods?watch=1&allowWatchBookmarks=true&resourceVersion=" + strconv.FormatUint(rev, 10),
			want: []string{fmt.Sprintf("BOOKMARK %d ", rev)}},
		{name: "initial events", path: "/api/v1/namespaces/default/pods?watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
			want: []string{"ADDED", "ADDED", "ADDED", fmt.Sprintf("BOOKMARK %d true", rev)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, _ := e.watchStream(tt.path)
			for _, w := range tt.want {
				typ, obj := next()
				got := typ
				if typ == "BOOKMARK" {
					end, _ := get(obj, "metadata", "annotations", metav1.InitialEventsAnnotationKey).(string)
					got = fmt.Sprintf("%s %v %s", typ, get(obj, "metadata", "resourceVersion"), end)
				}
				if got != w {
					t.Fatalf("event %q, want %q (%v)", got, w, obj)
				}
			}
		})
	}
}

// Many watches share the one cache: it keeps one entry per pod whatever the number of watchers, each
// change is decoded once, and the watchers' goroutines end with their watches.
func TestWatchersShareCache(t *testing.T) {
	const pods, watchers = 2000, 50
	e := start(t, nil, true)
	rev := e.putPods("default", "p", "web", pods)
	c := waitCacheRV(t, e, bus.BucketPods, rev)
	decodes := c.decodes.Load()
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	baseline := httpGoroutines()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, watchers)
	modified := make(chan struct{}, watchers)
	ready := make(chan struct{}, watchers)
	for range watchers {
		evs, err := e.watchEvents(ctx, client, "/api/v1/namespaces/default/pods?watch=true")
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			added := 0
			for ev := range evs {
				switch ev {
				case "ADDED":
					if added++; added == pods {
						ready <- struct{}{}
					}
				case "MODIFIED":
					modified <- struct{}{}
					return
				default:
					errs <- fmt.Errorf("unexpected event %v", ev)
					return
				}
			}
		}()
	}
	deadline := time.After(60 * time.Second)
	for range watchers {
		select {
		case <-ready:
		case err := <-errs:
			t.Fatal(err)
		case <-deadline:
			t.Fatal("watchers did not get the initial state")
		}
	}
	if n := c.len(); n != pods {
		t.Errorf("cache holds %d objects, want %d", n, pods)
	}
	if n := c.watcherCount(); n != watchers {
		t.Errorf("%d watchers registered, want %d", n, watchers)
	}
	if n := httpGoroutines(); n < baseline+watchers {
		t.Errorf("%d HTTP goroutines with %d watches open, baseline %d: the count misses them", n, watchers, baseline)
	}
	waitCacheRV(t, e, bus.BucketPods, e.putPod("default", "p-0007", "changed"))
	for range watchers {
		select {
		case <-modified:
		case err := <-errs:
			t.Fatal(err)
		case <-deadline:
			t.Fatal("watchers did not get the change")
		}
	}
	if n := c.decodes.Load() - decodes; n != 1 {
		t.Errorf("the cache decoded %d objects for one change, want 1", n)
	}
	if n := c.len(); n != pods {
		t.Errorf("cache holds %d objects, want %d", n, pods)
	}
	cancel()
	wg.Wait()
	tr.CloseIdleConnections()
	for start := time.Now(); c.watcherCount() != 0 || httpGoroutines() > baseline; {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d watchers and %d HTTP goroutines left, baseline %d", c.watcherCount(), httpGoroutines(), baseline)
		}
		tr.CloseIdleConnections()
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

// httpGoroutines counts the goroutines serving or reading HTTP: a watch's own (the embedded NATS server
// starts and ends goroutines of its own at any time).
func httpGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "net/http.") || strings.Contains(g, "services/admission.(*Service).watchCached") {
			n++
		}
	}
	return n
}

// BenchmarkListSelector lists 150,000 cached pods with a label selector that matches none, and a page
// of 500 of them.
//
//	go test -run '^$' -bench BenchmarkListSelector -benchmem ./services/admission/
func BenchmarkListSelector(b *testing.B) {
	const n = 150_000
	initial := newWatchCache(podKind, nil, 1, time.Hour, nil)
	for i := range n {
		ns := fmt.Sprintf("ns-%02d", i%50)
		name := fmt.Sprintf("pod-%06d", i)
		data, err := proto.Marshal(smallPod(ns, name, "web"))
		if err != nil {
			b.Fatal(err)
		}
		initial.apply(bus.PodKey(ns, name), jetstream.KeyValuePut, data, uint64(i+1))
	}
	c := newWatchCache(podKind, nil, 0, 0, nil)
	c.replace(initial, n)
	s := &Service{}
	for _, bc := range []struct {
		name  string
		query string
		table bool
		want  int
	}{
		{name: "selector matching none", query: "labelSelector=app%3Dnone&resourceVersion=0", want: 0},
		{name: "limit=500", query: "limit=500&resourceVersion=0", want: 500},
		{name: "table limit=500", query: "limit=500&resourceVersion=0", table: true, want: 500},
	} {
		b.Run(bc.name, func(b *testing.B) {
			q, _ := url.ParseQuery(bc.query)
			req, sel := listRequest(b, q, bc.table)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				if err := s.listCached(context.Background(), w, req, c, sel); err != nil {
					b.Fatal(err)
				}
				if w.Code != 200 || bc.want == 0 && !strings.Contains(w.Body.String(), `"items":[]`) {
					b.Fatalf("%d %.200s", w.Code, w.Body.String())
				}
			}
		})
	}
}

// fedCache is a pods cache fed directly, ready at revision 0.
func fedCache(t *testing.T) *watchCache {
	t.Helper()
	c := newWatchCache(podKind, nil, 0, 0, nil)
	c.replace(newWatchCache(podKind, nil, 1, time.Hour, nil), 0)
	return c
}

func (c *watchCache) putPod(t *testing.T, name, app string, rev uint64) {
	t.Helper()
	c.apply(bus.PodKey("default", name), jetstream.KeyValuePut, mustMarshal(t, smallPod("default", name, app)), rev)
}

// A watcher sees an object that starts or stops matching its selector as ADDED or DELETED.
func TestCacheEventTypes(t *testing.T) {
	c := fedCache(t)
	m, err := newMatcher(url.Values{"labelSelector": {"app=web"}}, podKind)
	if err != nil {
		t.Fatal(err)
	}
	w, _, _, _, err := c.register(selection{ns: "default", m: m}, 0, false, false)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		app  string // "": deleted
		want string // "": no event
	}{
		{app: "db", want: ""},
		{app: "web", want: watchAdded},
		{app: "web", want: watchModified},
		{app: "db", want: watchDeleted},
		{app: "", want: ""},
		{app: "web", want: watchAdded},
		{app: "", want: watchDeleted},
	}
	for i, st := range steps {
		rev := uint64(i + 1)
		if st.app == "" {
			c.apply(bus.PodKey("default", "p"), jetstream.KeyValueDelete, nil, rev)
		} else {
			c.putPod(t, "p", st.app, rev)
		}
		got := ""
		select {
		case it := <-w.ch:
			got = it.typ
			if it.ev.rev != rev {
				t.Errorf("step %d: event at %d, want %d", i, it.ev.rev, rev)
			}
		default:
		}
		if got != st.want {
			t.Errorf("step %d (app %q): event %q, want %q", i, st.app, got, st.want)
		}
	}
}

// A watcher that falls a whole buffer behind is closed; the others go on.
func TestSlowWatcherClosed(t *testing.T) {
	c := fedCache(t)
	slow, _, _, _, err := c.register(selection{m: matcher{label: labels.Everything(), field: fields.Everything()}}, 0, false, false)
	if err != nil {
		t.Fatal(err)
	}
	fast, _, _, _, _ := c.register(selection{m: matcher{label: labels.Everything(), field: fields.Everything()}}, 0, false, false)
	for i := range watcherBuffer + 1 {
		c.putPod(t, fmt.Sprintf("p%d", i), "web", uint64(i+1))
		<-fast.ch
	}
	n := 0
	for range slow.ch {
		n++
	}
	if n != watcherBuffer {
		t.Errorf("slow watcher got %d events before it was closed, want %d", n, watcherBuffer)
	}
	if got := c.watcherCount(); got != 1 {
		t.Errorf("%d watchers left, want the fast one", got)
	}
}

// Under a burst the ring grows past its minimum rather than drop changes younger than eventFreshness.
func TestRingGrowsWhileFresh(t *testing.T) {
	c := fedCache(t)
	const n = minCacheEvents + 500
	for i := range n {
		c.putPod(t, fmt.Sprintf("p%d", i), "web", uint64(i+1))
	}
	w, _, backlog, _, err := c.register(selection{m: matcher{label: labels.Everything(), field: fields.Everything()}}, 0, false, false)
	if err != nil {
		t.Fatalf("watch from the first change: %v", err)
	}
	defer c.stop(w)
	if len(backlog) != n || backlog[0].ev.rev != 1 {
		t.Errorf("backlog of %d events, want %d from revision 1", len(backlog), n)
	}
}
