package admission

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podbus/podbus/internal/metrics"
)

// request is one resource request, parsed from the URL:
// /api/v1/... or /apis/<group>/<version>/..., then [watch/][namespaces/<ns>/]<resource>[/<name>[/<subresource>]].
type request struct {
	ns, resource, name, sub string
	kind                    *kind
	watch                   bool
	user                    *userInfo
	q                       url.Values
	table                   *tableOptions // non-nil when the client asked for a Table
}

// Handler is the API's HTTP handler.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"/healthz", "/livez"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok"))
		})
	}
	mux.HandleFunc("/readyz", s.handleReadyz)
	mux.HandleFunc("/version", handleVersion)
	mux.Handle("/", s.instrumented(s.bodyDeadline(s.authenticated(s.limited(s.route)))))
	return mux
}

// handleReadyz answers as kube-apiserver's /readyz: "ok" when every check passes, else 500 naming
// the failed ones (all of them with ?verbose). The API is ready when it is connected to NATS and the
// watch cache of every kind has read its bucket once: before that it could not answer a list.
func (s *Service) handleReadyz(w http.ResponseWriter, r *http.Request) {
	type check struct {
		name string
		ok   bool
	}
	checks := []check{{"nats", s.conn.NC.IsConnected()}}
	s.cachesMu.Lock()
	for bucket, c := range s.caches {
		checks = append(checks, check{"watch-cache-" + strings.ToLower(bucket), c.isReady()})
	}
	s.cachesMu.Unlock()
	slices.SortFunc(checks[1:], func(a, b check) int { return strings.Compare(a.name, b.name) })
	var out strings.Builder
	failed := false
	for _, c := range checks {
		if c.ok {
			fmt.Fprintf(&out, "[+]%s ok\n", c.name)
		} else {
			failed = true
			fmt.Fprintf(&out, "[-]%s failed: reason withheld\n", c.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if failed {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, out.String()+"readyz check failed\n")
		return
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		_, _ = io.WriteString(w, out.String()+"readyz check passed\n")
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// authenticated checks the request's credentials (authn.go) and passes the user on: kube's 401 Status
// without them.
func (s *Service) authenticated(next func(http.ResponseWriter, *http.Request, *userInfo)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u := s.user(r)
		if u == nil {
			writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		next(w, r, u)
	}
}

func (s *Service) route(w http.ResponseWriter, r *http.Request, user *userInfo) {
	user = s.requester(r, user)
	if !s.authorize(w, r, attributesOf(r, user)) {
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	var gv schema.GroupVersion
	var rest string
	switch {
	case path == "/metrics":
		// Behind RBAC as kube-apiserver's: get on the non-resource URL /metrics (system:masters,
		// system:monitoring).
		metrics.Handler().ServeHTTP(w, r)
		return
	case path == "/ui" || strings.HasPrefix(path, "/ui/"):
		// The web view, behind RBAC as /metrics: get on the non-resource URLs /ui/* (view, edit, admin).
		s.ui.ServeHTTP(w, r)
		return
	case path == "/api":
		s.handleAPI(w, r)
		return
	case path == "/apis":
		s.handleAPIs(w, r)
		return
	case path == "/openapi/v2":
		s.handleOpenAPIV2(w, r)
		return
	case path == "/openapi/v3":
		s.handleOpenAPIRoot(w, r)
		return
	case strings.HasPrefix(path, "/openapi/v3/"):
		s.handleOpenAPI(w, r, strings.TrimPrefix(path, "/openapi/v3/"))
		return
	case path == "/api/v1" || strings.HasPrefix(path, "/api/v1/"):
		gv = schema.GroupVersion{Version: "v1"}
		rest = strings.TrimPrefix(strings.TrimPrefix(path, "/api/v1"), "/")
	case strings.HasPrefix(path, "/apis/"):
		parts := strings.SplitN(strings.TrimPrefix(path, "/apis/"), "/", 3)
		if len(parts) == 1 {
			s.handleAPIGroup(w, r, parts[0])
			return
		}
		gv = schema.GroupVersion{Group: parts[0], Version: parts[1]}
		if len(parts) == 3 {
			rest = parts[2]
		}
	default:
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if len(s.reg.in(gv)) == 0 {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	if rest == "" {
		s.handleResourceList(w, r, gv)
		return
	}
	req, ok := parsePath(rest)
	if !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	req.kind = s.reg.lookup(gv.Group, gv.Version, req.resource)
	if req.kind == nil || (!req.kind.namespaced && req.ns != "") {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	req.user = user
	req.q = r.URL.Query()
	if watchRequested(req.q) {
		req.watch = true
	}
	req.table = parseTableAccept(r.Header.Get("Accept"), req.q)
	if req.kind.serve != nil {
		req.kind.serve(s, w, r, req)
		return
	}
	s.serveGeneric(w, r, req)
}

// parsePath splits the part after the group version.
func parsePath(p string) (request, bool) {
	var req request
	parts := strings.Split(p, "/")
	if parts[0] == "watch" {
		req.watch = true
		parts = parts[1:]
	}
	if len(parts) == 0 || parts[0] == "" {
		return req, false
	}
	if parts[0] == "namespaces" && len(parts) >= 3 {
		req.ns = parts[1]
		parts = parts[2:]
	}
	req.resource = parts[0]
	if len(parts) > 1 {
		req.name = parts[1]
	}
	if len(parts) > 2 {
		req.sub = parts[2]
	}
	if len(parts) > 3 || (req.name == "" && len(parts) > 1) {
		return req, false
	}
	if req.ns != "" && req.resource == "namespaces" {
		return req, false
	}
	return req, true
}
