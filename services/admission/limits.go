package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podbus/podbus/internal/metrics"
	"github.com/podbus/podbus/internal/webview"
)

// Limits bound what clients can make one replica do, as kube-apiserver's generic filters do (max
// in-flight, request timeout) plus a cap on each user's watches. Zero fields take the defaults below;
// a negative in-flight or watch limit means no limit.
type Limits struct {
	// RequestTimeout bounds a request that is not a watch or a log stream (504 Timeout after it).
	// A smaller ?timeout= of the request wins.
	RequestTimeout time.Duration
	// BodyReadTimeout bounds the arrival of a request body; a slower client gets 408 and loses the
	// connection.
	BodyReadTimeout time.Duration
	// WriteTimeout bounds writing the answer of a request that is not a watch or a log stream.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection without a request for that long.
	IdleTimeout time.Duration
	// MaxRequestsInflight bounds concurrent read-only requests, MaxMutatingRequestsInflight
	// concurrent writes (429 Too Many Requests beyond). Watches and log streams count in neither.
	MaxRequestsInflight         int
	MaxMutatingRequestsInflight int
	// MaxWatchesPerUser bounds the concurrent watches and log streams of one user (the
	// authenticated user, or the client address in the insecure mode, where everyone is one user): 429
	// beyond.
	MaxWatchesPerUser int
	// MaxObjectBytes bounds an object as stored, and the JSON a PATCH produces (413 beyond).
	MaxObjectBytes int
	// MaxJSONPatchOperations bounds the operations of one JSON patch (413 beyond).
	MaxJSONPatchOperations int

	// hold, when set, runs inside a request's in-flight slot before it is served (tests fill the
	// slots with it).
	hold func(*http.Request)
}

// Defaults of Limits, kube-apiserver's where it has one.
const (
	DefaultRequestTimeout              = 60 * time.Second
	DefaultBodyReadTimeout             = 30 * time.Second
	DefaultWriteTimeout                = DefaultRequestTimeout + 30*time.Second
	DefaultIdleTimeout                 = 90 * time.Second
	DefaultMaxRequestsInflight         = 400
	DefaultMaxMutatingRequestsInflight = 200
	DefaultMaxWatchesPerUser           = 100
	// DefaultMaxObjectBytes is etcd's default request limit, which bounds a kube object.
	DefaultMaxObjectBytes         = 3 << 19 // 1.5 MiB
	DefaultMaxJSONPatchOperations = 10000
)

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	def(&l.RequestTimeout, DefaultRequestTimeout)
	def(&l.BodyReadTimeout, DefaultBodyReadTimeout)
	def(&l.WriteTimeout, l.RequestTimeout+30*time.Second)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	defInt(&l.MaxRequestsInflight, DefaultMaxRequestsInflight)
	defInt(&l.MaxMutatingRequestsInflight, DefaultMaxMutatingRequestsInflight)
	defInt(&l.MaxWatchesPerUser, DefaultMaxWatchesPerUser)
	if l.MaxObjectBytes <= 0 {
		l.MaxObjectBytes = DefaultMaxObjectBytes
	}
	if l.MaxJSONPatchOperations <= 0 {
		l.MaxJSONPatchOperations = DefaultMaxJSONPatchOperations
	}
	return l
}

// limiter holds the in-flight slots and the watch counts of one replica.
type limiter struct {
	l        Limits
	readonly chan struct{} // nil: unlimited
	mutating chan struct{}
	mu       sync.Mutex
	watches  map[string]int
}

func newLimiter(l Limits) *limiter {
	slots := func(n int) chan struct{} {
		if n < 0 {
			return nil
		}
		return make(chan struct{}, n)
	}
	return &limiter{l: l, readonly: slots(l.MaxRequestsInflight), mutating: slots(l.MaxMutatingRequestsInflight), watches: map[string]int{}}
}

// tooManyRequests is kube-apiserver's max-in-flight answer; clients retry after Retry-After.
func tooManyRequests(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	writeStatus(w, apierrors.NewTooManyRequests(msg, 1))
}

const tooManyRequestsMessage = "Too many requests, please try again later."

// limited wraps the authenticated API: long-running requests (watches, log streams) count against
// their user's watch cap and run without deadlines; every other request takes an in-flight slot,
// a deadline on its answer and its whole run (bodyDeadline bounds its body).
func (s *Service) limited(next func(http.ResponseWriter, *http.Request, *userInfo)) func(http.ResponseWriter, *http.Request, *userInfo) {
	lim := s.limits
	return func(w http.ResponseWriter, r *http.Request, user *userInfo) {
		rc := http.NewResponseController(w)
		if longRunning(r) {
			owner := user.Name
			if user.Name == unsecuredUser {
				owner, _, _ = net.SplitHostPort(r.RemoteAddr)
				owner = "address " + owner
			}
			release, ok := lim.acquireWatch(owner)
			if !ok {
				metrics.Count("admission.limit.watches", 1)
				tooManyRequests(w, fmt.Sprintf("Too many watches, please try again later: the limit is %d per user.", lim.l.MaxWatchesPerUser))
				return
			}
			defer release()
			// A deadline an earlier request left on the keep-alive connection must not end the stream.
			_ = rc.SetWriteDeadline(time.Time{})
			next(w, r, user)
			return
		}
		slots := lim.readonly
		if mutatingMethod(r.Method) {
			slots = lim.mutating
		}
		if slots != nil {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			default:
				metrics.Count("admission.limit.inflight", 1)
				tooManyRequests(w, tooManyRequestsMessage)
				return
			}
		}
		_ = rc.SetWriteDeadline(time.Now().Add(lim.l.WriteTimeout))
		if lim.l.hold != nil {
			lim.l.hold(r)
		}
		withTimeout(w, r, requestTimeout(r, lim.l.RequestTimeout), func(w http.ResponseWriter, r *http.Request) { next(w, r, user) })
	}
}

// bodyDeadline bounds the arrival of every request body from the moment its headers are read, so that
// a request answered without reading its body (401, 429) cannot hold its connection either: net/http
// drains an unread body before it answers.
func (s *Service) bodyDeadline(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !longRunning(r) && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(s.limits.l.BodyReadTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next(w, r)
	}
}

// acquireWatch counts one more long-running request of owner; false when at the cap.
func (l *limiter) acquireWatch(owner string) (release func(), ok bool) {
	if l.l.MaxWatchesPerUser < 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.watches[owner] >= l.l.MaxWatchesPerUser {
		return nil, false
	}
	l.watches[owner]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.watches[owner]--; l.watches[owner] <= 0 {
			delete(l.watches, owner)
		}
	}, true
}

// longRunning reports a watch (?watch= or a /watch/ path) or a pod log stream, which kube-apiserver's
// long-running request check exempts from the in-flight limit and the request timeout.
func longRunning(r *http.Request) bool {
	if streamRequest(r) {
		return true
	}
	if r.Method != http.MethodGet {
		return false
	}
	if v := r.URL.Query().Get("watch"); v == "true" || v == "1" {
		return true
	}
	seg := strings.Split(strings.TrimSuffix(r.URL.Path, "/"), "/")
	switch {
	case len(seg) > 3 && seg[1] == "api" && seg[3] == "watch":
		return true
	case len(seg) > 4 && seg[1] == "apis" && seg[4] == "watch":
		return true
	case r.URL.Path == webview.Prefix+"stream": // the web view's server-sent events
		return true
	}
	// /api/v1/namespaces/<ns>/pods/<name>/log
	return len(seg) == 8 && seg[1] == "api" && seg[3] == "namespaces" && seg[5] == "pods" && seg[7] == "log"
}

func mutatingMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// requestTimeout is the server's timeout, or the request's ?timeout= when shorter.
func requestTimeout(r *http.Request, max time.Duration) time.Duration {
	if v := r.URL.Query().Get("timeout"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 && d < max {
			return d
		}
	}
	return max
}

// deadlineBody lifts the body's read deadline once the body is read, so that it cannot end the
// request later (net/http cancels a request whose connection read fails).
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// errRequestTimeout is kube-apiserver's answer to a request that outlived its deadline.
var errRequestTimeout = apierrors.NewTimeoutError("request did not complete within requested timeout - context deadline exceeded", 0)

// errBodyTimeout answers a request whose body did not arrive within Limits.BodyReadTimeout.
var errBodyTimeout = &apierrors.StatusError{ErrStatus: metav1.Status{
	Status: metav1.StatusFailure, Code: http.StatusRequestTimeout, Reason: metav1.StatusReasonTimeout,
	Message: "Timeout: the request body did not arrive in time",
}}

// withTimeout serves h with a deadline of d: past it h's context ends and the client gets 504 unless
// h has started answering; withTimeout returns once h has. h runs on the caller's goroutine, whose
// stack has grown to what serving takes, rather than on a fresh one that would grow again for every
// request; the 504 is written from the deadline's own goroutine, through tw's lock.
func withTimeout(w http.ResponseWriter, r *http.Request, d time.Duration, h http.HandlerFunc) {
	ctx, cancel := context.WithTimeout(r.Context(), d)
	defer cancel()
	tw := &timeoutWriter{w: w, h: make(http.Header)}
	answered := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(answered)
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) && r.Context().Err() == nil {
			metrics.Count("admission.limit.timeouts", 1)
			tw.timeout()
		}
	})
	// The 504 must be written before the handler returns: w is not to be used after that.
	defer func() {
		if !stop() {
			<-answered
		}
	}()
	h(tw, r.WithContext(ctx))
}

// timeoutWriter lets the handler write until the deadline and answers 504 in its place after it. The
// handler writes its own header map, copied on WriteHeader, so the two never share one.
type timeoutWriter struct {
	w        http.ResponseWriter
	h        http.Header
	mu       sync.Mutex
	wrote    bool
	timedOut bool
}

func (tw *timeoutWriter) Header() http.Header { return tw.h }

func (tw *timeoutWriter) WriteHeader(code int) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.writeHeaderLocked(code)
}

func (tw *timeoutWriter) writeHeaderLocked(code int) {
	if tw.wrote || tw.timedOut {
		return
	}
	tw.wrote = true
	dst := tw.w.Header()
	for k, v := range tw.h {
		dst[k] = v
	}
	tw.w.WriteHeader(code)
}

func (tw *timeoutWriter) Write(p []byte) (int, error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.timedOut {
		return 0, http.ErrHandlerTimeout
	}
	tw.writeHeaderLocked(http.StatusOK)
	return tw.w.Write(p)
}

func (tw *timeoutWriter) Flush() {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.timedOut {
		return
	}
	tw.writeHeaderLocked(http.StatusOK)
	if f, ok := tw.w.(http.Flusher); ok {
		f.Flush()
	}
}

// timeout answers 504 in place of the handler unless it has started answering: then it finishes
// (its context has ended, and the write deadline bounds it).
func (tw *timeoutWriter) timeout() {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.wrote {
		return
	}
	tw.timedOut = true
	writeStatus(tw.w, errRequestTimeout)
	if f, ok := tw.w.(http.Flusher); ok {
		f.Flush()
	}
}

// checkObjectSize refuses an object of n bytes over Limits.MaxObjectBytes with 413, in the words of
// etcd's refusal that kube-apiserver passes on ("etcdserver: request is too large").
func (s *Service) checkObjectSize(n int) error {
	if n > s.limits.l.MaxObjectBytes {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("store: request is too large: the object is %d bytes, the limit is %d", n, s.limits.l.MaxObjectBytes))
	}
	return nil
}
