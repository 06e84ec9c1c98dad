// Package health serves a process's /healthz, /readyz, /metrics (Prometheus) and /debug/vars (the
// expvar counters). The health port has no authentication, like kubelet's read-only port of old:
// bind it to loopback or a private network (compose does), never to a public address.
package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/podbus/podbus/internal/metrics"
)

// Serve answers /healthz while the process runs and /readyz while ready() is true, until ctx ends.
func Serve(ctx context.Context, addr string, ready func() bool) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/debug/vars", VarsHandler())
	mux.Handle("/metrics", metrics.Handler())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
