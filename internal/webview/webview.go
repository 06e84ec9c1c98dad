// Package webview is podbus's live web view: the pipeline's stages with their counts, rates and p99
// latencies, the nodes as grids filling with pods, recent events, the unschedulable pods and their
// reasons, and each pod's audit timeline drawn as a Gantt chart of the seed flow's stages.
//
//	pods bucket ──KV watch──┐
//	nodes bucket ─KV watch──┼─▶ model ──change──▶ /ui/stream (server-sent events: HTML fragments,
//	EVENTS ──ordered cons.──┘                       htmx swaps them in place)
//	AUDIT ──audit.Timeline──▶ /ui/pods/<ns>/<name>/timeline (read when the page asks, on the pod's changes)
//
// The pages are HTML rendered here; the browser runs htmx and its SSE extension (vendored under
// assets/vendor, see assets/vendor/package.json), nothing else. The view watches the buckets only
// once someone opens it. It does no authorization: the API server (services/admission) mounts it
// behind RBAC.
package webview

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
)

// Prefix is where the view is mounted: every path it serves starts with it.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// Config configures a View.
type Config struct {
	// AuditStream is the stream pod timelines are read from (default bus.StreamAudit).
	AuditStream string
	Logger      *slog.Logger
}

// View is the web view of one cluster. Its zero value is not usable: use New.
type View struct {
	js    jetstream.JetStream
	cfg   Config
	log   *slog.Logger
	model *model
	mux   *http.ServeMux

	startOnce sync.Once
	wanted    chan struct{} // closed by the first request
}

// New returns a view reading js. Run feeds it.
func New(js jetstream.JetStream, cfg Config) *View {
	if cfg.AuditStream == "" {
		cfg.AuditStream = bus.StreamAudit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	v := &View{js: js, cfg: cfg, log: cfg.Logger, model: newModel(), wanted: make(chan struct{})}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	v.mux = http.NewServeMux()
	v.mux.Handle("GET "+Prefix+"assets/", http.StripPrefix(Prefix+"assets/", http.FileServerFS(static)))
	v.mux.HandleFunc("GET "+Prefix+"{$}", v.handleIndex)
	v.mux.HandleFunc("GET "+Prefix+"stream", v.handleStream)
	v.mux.HandleFunc("GET "+Prefix+"pods/{ns}/{name}", v.handlePod)
	v.mux.HandleFunc("GET "+Prefix+"pods/{ns}/{name}/timeline", v.handleTimeline)
	v.mux.HandleFunc("GET "+strings.TrimSuffix(Prefix, "/"), func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
	})
	return v
}

// Run feeds the view from the buckets and the events stream from the first request on, until ctx ends.
func (v *View) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-v.wanted:
	}
	v.feed(ctx)
	return nil
}

// ServeHTTP serves the pages under Prefix.
func (v *View) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.startOnce.Do(func() { close(v.wanted) })
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
	v.mux.ServeHTTP(w, r)
}
