package admission

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/podbus/podbus/internal/metrics"
)

// instrumented counts every API request as kube-apiserver does (apiserver_request_total,
// apiserver_request_duration_seconds, apiserver_longrunning_requests). Label values come from a fixed
// set: a resource the API does not serve is counted as "other", so no request can mint new series.
func (s *Service) instrumented(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := attributesOf(r, nil)
		verb := metricVerb(a, r)
		group, resource, sub := a.group, "", ""
		if a.resourceRequest {
			resource, sub = "other", ""
			if s.reg.lookup(a.group, a.version, a.resource) != nil {
				resource = a.resource
				if a.sub != "" {
					sub = "other"
					if knownSubresources[a.sub] {
						sub = a.sub
					}
				}
			} else {
				group = "other"
			}
		}
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		if verb == "WATCH" {
			g := metrics.APILongRunning.WithLabelValues(verb, group, resource)
			g.Inc()
			defer g.Dec()
		}
		next.ServeHTTP(rec, r)
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		metrics.APIRequests.WithLabelValues(verb, group, resource, sub, strconv.Itoa(code)).Inc()
		if verb != "WATCH" {
			metrics.APIRequestDuration.WithLabelValues(verb, group, resource, sub).Observe(time.Since(start).Seconds())
		}
	})
}

var knownSubresources = map[string]bool{"status": true, "log": true, "eviction": true, "binding": true,
	"finalize": true, "scale": true, "ephemeralcontainers": true, "exec": true, "attach": true, "portforward": true}

// metricVerb is kube-apiserver's verb label: the HTTP method, refined to LIST, WATCH, APPLY or
// DELETECOLLECTION for resource requests.
func metricVerb(a attributes, r *http.Request) string {
	if !a.resourceRequest {
		if r.Method == http.MethodHead {
			return http.MethodGet
		}
		switch r.Method {
		case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			return r.Method
		}
		return "other"
	}
	switch a.verb {
	case "create":
		return http.MethodPost
	case "update":
		return http.MethodPut
	case "patch":
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/apply-patch") {
			return "APPLY"
		}
		return http.MethodPatch
	case "get", "list", "watch", "delete", "deletecollection":
		return strings.ToUpper(a.verb)
	}
	return "other"
}

// statusRecorder remembers the status code written; Unwrap lets http.ResponseController reach the
// connection (flushes of watches, deadlines).
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
