package admission

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/syncbuf"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// doublingPatch copies the labels into themselves n times: each copy doubles the document.
func doublingPatch(n int) string {
	ops := make([]string, n)
	for i := range ops {
		ops[i] = fmt.Sprintf(`{"op":"copy","from":"/metadata/labels","path":"/metadata/labels/k%d"}`, i)
	}
	return "[" + strings.Join(ops, ",") + "]"
}

// Hostile bodies get a bounded answer: the doubling JSON patch, too many operations, a body over the
// request limit, patches and objects over the object limit.
func TestHostileBodies(t *testing.T) {
	e := start(t, nil, false)
	e.mustCreate("target")
	const podPath = "/api/v1/namespaces/default/pods/target"
	huge := strings.Repeat("a", 2<<20) // under the body limit, over the object limit
	testOps := "[" + strings.Repeat(`{"op":"test","path":"/kind","value":"Pod"},`, DefaultMaxJSONPatchOperations) + `{"op":"test","path":"/kind","value":"Pod"}]`
	tests := []struct {
		name, method, path, body, contentType string
		code                                  int
		reason                                metav1.StatusReason
		message, cause                        string // substrings
	}{
		{name: "doubling copies", method: "PATCH", path: podPath, body: doublingPatch(64), contentType: "application/json-patch+json",
			code: 413, reason: metav1.StatusReasonRequestEntityTooLarge, message: "Unable to complete the copy, the accumulated size increase of copy is"},
		{name: "failing operation", method: "PATCH", path: podPath, body: `[{"op":"remove","path":"/nope"}]`, contentType: "application/json-patch+json",
			code: 422, reason: metav1.StatusReasonInvalid, message: "the server rejected our request due to an error in our request"},
		{name: "test without a value (the library panics)", method: "PATCH", path: podPath, body: `[{"op":"test","path":""}]`, contentType: "application/json-patch+json",
			code: 422, reason: metav1.StatusReasonInvalid, message: "the server rejected our request due to an error in our request"},
		{name: "too many operations", method: "PATCH", path: podPath, body: testOps, contentType: "application/json-patch+json",
			code: 413, reason: metav1.StatusReasonRequestEntityTooLarge,
			message: fmt.Sprintf("The allowed maximum operations in a JSON patch is %d, got %d", DefaultMaxJSONPatchOperations, DefaultMaxJSONPatchOperations+1)},
		{name: "body over 3 MiB", method: "POST", path: "/api/v1/namespaces/default/pods", body: podJSON("big", `labels={"x":"`+strings.Repeat("a", 4<<20)+`"}`),
			code: 413, reason: metav1.StatusReasonRequestEntityTooLarge, message: "limit is 3145728"},
		{name: "merge patch result over the object limit", method: "PATCH", path: podPath, contentType: "application/merge-patch+json",
			body: `{"metadata":{"annotations":{"x":"` + huge + `"}}}`, code: 413, reason: metav1.StatusReasonRequestEntityTooLarge, message: "the patched object is"},
		{name: "strategic patch result over the object limit", method: "PATCH", path: podPath, contentType: "application/strategic-merge-patch+json",
			body: `{"metadata":{"annotations":{"x":"` + huge + `"}}}`, code: 413, reason: metav1.StatusReasonRequestEntityTooLarge, message: "the patched object is"},
		{name: "json patch result over the object limit", method: "PATCH", path: podPath, contentType: "application/json-patch+json",
			body: `[{"op":"add","path":"/metadata/annotations","value":{"x":"` + huge + `"}}]`, code: 413, reason: metav1.StatusReasonRequestEntityTooLarge, message: "the patched object is"},
		{name: "stored pod over the object limit", method: "POST", path: "/api/v1/namespaces/default/pods",
			body: podJSON("fat", `spec={"containers":[{"name":"c","image":"nginx","env":[{"name":"E","value":"`+huge+`"}]}]}`),
			code: 413, reason: metav1.StatusReasonRequestEntityTooLarge, message: "store: request is too large: the object is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var headers []string
			if tt.contentType != "" {
				headers = append(headers, "Content-Type: "+tt.contentType)
			}
			resp, data := e.do(tt.method, tt.path, tt.body, headers...)
			st := decodeStatus(t, data)
			if resp.StatusCode != tt.code || (tt.reason != "" && st.Reason != tt.reason) || !strings.Contains(st.Message, tt.message) {
				t.Errorf("got %d %s %.300q, want %d %s %q", resp.StatusCode, st.Reason, st.Message, tt.code, tt.reason, tt.message)
			}
			if tt.cause != "" && (st.Details == nil || len(st.Details.Causes) != 1 || !strings.Contains(st.Details.Causes[0].Message, tt.cause)) {
				t.Errorf("causes %+v, want %q", st.Details, tt.cause)
			}
		})
	}
	// The pod is unchanged and a small patch still applies.
	resp, data := e.do("PATCH", podPath, `{"metadata":{"labels":{"ok":"yes"}}}`, "Content-Type: application/merge-patch+json")
	if resp.StatusCode != 200 {
		t.Fatalf("small patch: %d %s", resp.StatusCode, data)
	}
}

// A body trickling in slower than BodyReadTimeout is cut off: 408, then the connection closes.
func TestSlowBodyIsCutOff(t *testing.T) {
	e := start(t, func(c *Config) { c.Limits.BodyReadTimeout = 200 * time.Millisecond }, false)
	conn, err := net.Dial("tcp", e.svc.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fmt.Fprintf(conn, "POST /api/v1/namespaces/default/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // one byte at a time until the server gives up
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer before the deadline: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d %s, want 408", resp.StatusCode, body)
	}
	// The server closes the connection rather than read the rest of the body.
	if _, err := br.ReadByte(); err == nil {
		t.Error("connection still open after the 408")
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Error("connection not closed before the deadline")
	}
	cancel()
	wg.Wait()
}

// A request outliving RequestTimeout (or its shorter ?timeout=) gets kube-apiserver's 504 Status.
func TestRequestTimeout(t *testing.T) {
	tests := []struct {
		name    string
		limit   time.Duration
		query   string
		message string
	}{
		{name: "server timeout", limit: 200 * time.Millisecond},
		{name: "shorter timeout of the request", limit: time.Minute, query: "?timeout=200ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No store: the create waits for an answer that never comes.
			e := start(t, func(c *Config) { c.Limits.RequestTimeout = tt.limit; c.ReplyTimeout = time.Minute }, true)
			resp, data := e.do("POST", "/api/v1/namespaces/default/pods"+tt.query, podJSON("slow"))
			st := decodeStatus(t, data)
			// The handler may see its context end and answer first, in nearly the same words.
			want := "Timeout: request did not complete within requested timeout - "
			if resp.StatusCode != http.StatusGatewayTimeout || st.Reason != metav1.StatusReasonTimeout || !strings.HasPrefix(st.Message, want) {
				t.Errorf("got %d %s %q, want 504 Timeout %q", resp.StatusCode, st.Reason, st.Message, want)
			}
		})
	}
}

// withTimeout answers kube's 504 at the deadline without waiting for the handler to answer, and
// returns only once the handler has.
func TestWithTimeout(t *testing.T) {
	release := make(chan struct{})
	returned := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		withTimeout(w, r, 50*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			<-release
			w.Header().Set("X-Late", "1")
			if _, err := w.Write([]byte("late")); !errors.Is(err, http.ErrHandlerTimeout) {
				t.Errorf("late write: %v, want ErrHandlerTimeout", err)
			}
		})
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	st := decodeStatus(t, data)
	want := "Timeout: request did not complete within requested timeout - context deadline exceeded"
	if resp.StatusCode != http.StatusGatewayTimeout || st.Reason != metav1.StatusReasonTimeout || st.Message != want || resp.Header.Get("X-Late") != "" {
		t.Errorf("got %d %s %q, want 504 Timeout %q", resp.StatusCode, st.Reason, st.Message, want)
	}
	select {
	case <-returned:
		t.Fatal("withTimeout returned before its handler")
	default:
	}
	close(release)
	<-returned
}

// holder blocks the requests that carry an X-Hold header inside their in-flight slot until released.
type holder struct {
	entered chan struct{}
	release chan struct{}
}

func newHolder() *holder {
	return &holder{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *holder) hold(r *http.Request) {
	if r.Header.Get("X-Hold") == "" {
		return
	}
	h.entered <- struct{}{}
	<-h.release
}

// waitEntered waits for n held requests.
func (h *holder) waitEntered(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-h.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("held request did not arrive")
		}
	}
}

// With the in-flight slots full, kube-apiserver's 429 with Retry-After; read-only and mutating requests
// have their own slots, and watches take none.
func TestInflightLimits(t *testing.T) {
	h := newHolder()
	e := start(t, func(c *Config) {
		c.Limits.MaxRequestsInflight, c.Limits.MaxMutatingRequestsInflight = 1, 1
		c.Limits.hold = h.hold
	}, false)
	e.mustCreate("p")
	var wg sync.WaitGroup
	defer wg.Wait()
	held := func(method, path, body string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(method, e.base+path, strings.NewReader(body))
			req.Header.Set("X-Hold", "1")
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	held("GET", "/api/v1/namespaces/default/pods/p", "")
	held("POST", "/api/v1/namespaces/default/pods", podJSON("q"))
	h.waitEntered(t, 2)
	// A watch takes no slot.
	next, stop := e.watchStream("/api/v1/namespaces/default/pods?watch=1")
	if typ, _ := next(); typ != watchAdded {
		t.Errorf("watch event %q, want ADDED", typ)
	}
	stop()
	tests := []struct{ name, method, path, body string }{
		{"read-only", "GET", "/api/v1/namespaces/default/pods", ""},
		{"mutating", "POST", "/api/v1/namespaces/default/pods", podJSON("r")},
		{"patch", "PATCH", "/api/v1/namespaces/default/pods/p", `{"metadata":{"labels":{"a":"b"}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, data := e.do(tt.method, tt.path, tt.body, "Content-Type: application/merge-patch+json")
			st := decodeStatus(t, data)
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || st.Reason != metav1.StatusReasonTooManyRequests ||
				st.Message != "Too many requests, please try again later." {
				t.Errorf("got %d Retry-After %q %s %q", resp.StatusCode, resp.Header.Get("Retry-After"), st.Reason, st.Message)
			}
		})
	}
	close(h.release)
	wg.Wait()
	if resp, data := e.do("GET", "/api/v1/namespaces/default/pods", ""); resp.StatusCode != 200 {
		t.Errorf("after release: %d %s", resp.StatusCode, data)
	}
}

// Watches beyond MaxWatchesPerUser get 429; the count is per user (per address when anonymous) and
// falls when a watch ends.
func TestWatchesPerUser(t *testing.T) {
	e := start(t, func(c *Config) {
		c.Limits.MaxWatchesPerUser = 2
		c.InsecureHTTP = false
		c.TokenAuthFile = tokenFile(t, "tok-a,alice,1", "tok-b,bob,2")
	}, false)
	const path = "/api/v1/namespaces/default/pods?watch=1"
	tryWatch := func(token string) int {
		req, _ := http.NewRequest("GET", e.base+path+"&timeoutSeconds=1", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	_, stop1 := e.watchStream(path, "Authorization: Bearer tok-a")
	_, stop2 := e.watchStream("/api/v1/watch/namespaces/default/pods", "Authorization: Bearer tok-a")
	defer stop2()
	if code := tryWatch("tok-a"); code != 429 {
		t.Errorf("alice's third watch: %d, want 429", code)
	}
	_, data := e.do("GET", path, "", "Authorization: Bearer tok-a")
	if st := decodeStatus(t, data); !strings.Contains(st.Message, "Too many watches") {
		t.Errorf("message %q", st.Message)
	}
	if code := tryWatch("tok-b"); code != 200 {
		t.Errorf("bob's watch: %d, want 200", code)
	}
	stop1()
	deadline := time.Now().Add(10 * time.Second)
	for tryWatch("tok-a") != 200 {
		if time.Now().After(deadline) {
			t.Fatal("alice's watch count did not fall after a watch ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Only the system namespace may use the system priority classes, with the Priority admission
// plugin's 403.
func TestSystemPriorityClassNamespace(t *testing.T) {
	e := start(t, nil, false)
	spec := func(class string) string {
		return `spec={"priorityClassName":"` + class + `","containers":[{"name":"c","image":"nginx"}]}`
	}
	tests := []struct {
		ns, class string
		code      int
		message   string
	}{
		{"default", "system-node-critical", 403, `pods "p" is forbidden: pods with system-node-critical priorityClass is not permitted in default namespace`},
		{"default", "system-cluster-critical", 403, `pods "p" is forbidden: pods with system-cluster-critical priorityClass is not permitted in default namespace`},
		{"kube-system", "system-node-critical", 201, ""},
	}
	for _, tt := range tests {
		t.Run(tt.ns+"/"+tt.class, func(t *testing.T) {
			resp, data := e.do("POST", "/api/v1/namespaces/"+tt.ns+"/pods", podJSON("p", spec(tt.class)))
			if resp.StatusCode != tt.code {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, data, tt.code)
			}
			if tt.message != "" {
				if st := decodeStatus(t, data); st.Reason != metav1.StatusReasonForbidden || st.Message != tt.message {
					t.Errorf("got %s %q, want Forbidden %q", st.Reason, st.Message, tt.message)
				}
			}
		})
	}
}

// Bearer tokens never reach the logs, whether right or wrong.
func TestTokensNotLogged(t *testing.T) {
	var buf syncbuf.Buffer
	e := start(t, func(c *Config) {
		c.InsecureHTTP = false
		c.TokenAuthFile = tokenFile(t, "s3cret-token,alice,1")
		c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}, false)
	e.do("POST", "/api/v1/namespaces/default/pods", podJSON("p"), "Authorization: Bearer s3cret-token")
	e.do("GET", "/api/v1/namespaces/default/pods", "", "Authorization: Bearer wr0ng-token")
	e.do("GET", "/api/v1/namespaces/default/pods/p", "", "Authorization: Bearer s3cret-token")
	for _, tok := range []string{"s3cret-token", "wr0ng-token"} {
		if strings.Contains(buf.String(), tok) {
			t.Errorf("token %q in the log:\n%s", tok, buf.String())
		}
	}
}

func TestLongRunning(t *testing.T) {
	tests := []struct {
		method, url string
		want        bool
	}{
		{"GET", "/api/v1/pods?watch=true", true},
		{"GET", "/api/v1/namespaces/default/pods?watch=1", true},
		{"GET", "/api/v1/watch/namespaces/default/pods", true},
		{"GET", "/apis/events.k8s.io/v1/watch/events", true},
		{"GET", "/api/v1/namespaces/default/pods/p/log", true},
		{"GET", "/api/v1/namespaces/watch/pods", false},
		{"GET", "/api/v1/namespaces/default/pods?watch=false", false},
		{"GET", "/api/v1/namespaces/default/pods/log", false},
		{"POST", "/api/v1/namespaces/default/pods?watch=1", false},
		{"GET", "/apis/apps/v1/namespaces/default/deployments/log", false},
	}
	for _, tt := range tests {
		r, _ := http.NewRequest(tt.method, "http://x"+tt.url, nil)
		if got := longRunning(r); got != tt.want {
			t.Errorf("%s %s: %v, want %v", tt.method, tt.url, got, tt.want)
		}
	}
}
