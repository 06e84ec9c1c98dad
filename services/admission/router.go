package admission

import (
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// request is one resource request, parsed from the URL:
// /api/v1/[watch/][namespaces/<ns>/]<resource>[/<name>[/<subresource>]].
type request struct {
	ns, resource, name, sub string
	watch                   bool
	user                    string
	q                       url.Values
	table                   *tableOptions // non-nil when the client asked for a Table
}

// Handler is the API's HTTP handler.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"/healthz", "/readyz", "/livez"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok"))
		})
	}
	mux.HandleFunc("/version", handleVersion)
	mux.HandleFunc("/", s.authenticated(s.route))
	return mux
}

// authenticated checks the bearer token and passes the user on.
func (s *Service) authenticated(next func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u, ok := s.user(r)
		if !ok {
			writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		next(w, r, u)
	}
}

func (s *Service) route(w http.ResponseWriter, r *http.Request, user string) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/api":
		handleAPI(w, r)
		return
	case path == "/apis":
		handleAPIs(w, r)
		return
	case path == "/api/v1":
		handleAPIV1(w, r)
		return
	case path == "/openapi/v2":
		handleOpenAPIV2(w, r)
		return
	case path == "/openapi/v3":
		handleOpenAPIRoot(w, r)
		return
	case path == "/openapi/v3/api/v1":
		handleOpenAPIV1(w, r)
		return
	case !strings.HasPrefix(path, "/api/v1/"):
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	req, ok := parsePath(strings.TrimPrefix(path, "/api/v1/"))
	if !ok {
		writeStatus(w, notFoundPath(r.URL.Path))
		return
	}
	req.user = user
	req.q = r.URL.Query()
	if req.q.Get("watch") == "true" || req.q.Get("watch") == "1" {
		req.watch = true
	}
	req.table = parseTableAccept(r.Header.Get("Accept"), req.q)

	switch req.resource {
	case "pods":
		s.servePods(w, r, req)
	case "nodes":
		s.serveNodes(w, r, req)
	case "events":
		s.serveEvents(w, r, req)
	case "namespaces":
		s.serveNamespaces(w, r, req)
	default:
		writeStatus(w, notFoundPath(r.URL.Path))
	}
}

// parsePath splits the part after /api/v1/.
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

// clusterScoped rejects a namespaced URL for a cluster-scoped resource.
func clusterScoped(w http.ResponseWriter, r *http.Request, req request) bool {
	if req.ns != "" {
		writeStatus(w, notFoundPath(r.URL.Path))
		return false
	}
	return true
}
