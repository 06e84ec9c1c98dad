// Command demo-web is the tiny HTTP server podbus ships as an OCI image (podbus/demo-web) for real
// containers: `/` names the host (and the pod IP when it is known), `/healthz` answers "ok" until told to
// fail, so tests can drive readiness and liveness probes. Built static (CGO_ENABLED=0) for a FROM-scratch image.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	port := flag.String("port", env("PORT", "8080"), "port to listen on (env PORT)")
	unhealthyFile := flag.String("unhealthy-file", env("UNHEALTHY_FILE", ""), "/healthz answers 500 once this file exists (env UNHEALTHY_FILE)")
	healthyFor := flag.Duration("healthy-for", envDuration("HEALTHY_FOR"), "/healthz answers 500 after this long; 0: forever healthy (env HEALTHY_FOR)")
	flag.Parse()

	out := log.New(os.Stdout, "", log.LstdFlags)
	host, _ := os.Hostname()
	started := time.Now()

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		ip := podIP()
		if ip != "" {
			fmt.Fprintf(w, "hello from %s %s\n", host, ip)
		} else {
			fmt.Fprintf(w, "hello from %s\n", host)
		}
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if reason := unhealthy(*unhealthyFile, *healthyFor, started); reason != "" {
			http.Error(w, reason, http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &status{ResponseWriter: w, code: http.StatusOK}
		mux.ServeHTTP(rec, r)
		out.Printf("%s %s %s %d", r.RemoteAddr, r.Method, r.URL.Path, rec.code)
	})

	srv := &http.Server{Addr: ":" + *port, Handler: logged, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo-web: %v\n", err)
		os.Exit(1)
	}
	msg := fmt.Sprintf("demo-web listening on %s (host %s)", ln.Addr(), host)
	out.Print(msg)
	fmt.Fprintln(os.Stderr, msg)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintf(os.Stderr, "demo-web: %v\n", err)
		os.Exit(1)
	case <-ctx.Done():
	}
	out.Print("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "demo-web: shutdown: %v\n", err)
	}
}

// unhealthy says why /healthz fails, or "" when healthy.
func unhealthy(file string, healthyFor time.Duration, started time.Time) string {
	if file != "" {
		if _, err := os.Stat(file); err == nil {
			return "unhealthy: " + file + " exists"
		}
	}
	if healthyFor > 0 && time.Since(started) > healthyFor {
		return "unhealthy: healthy-for " + healthyFor.String() + " has passed"
	}
	return ""
}

// podIP is POD_IP when set (the downward API), else the first non-loopback IPv4 address of the pod's netns.
func podIP() string {
	if ip := os.Getenv("POD_IP"); ip != "" {
		return ip
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

type status struct {
	http.ResponseWriter
	code int
}

func (s *status) WriteHeader(code int) { s.code = code; s.ResponseWriter.WriteHeader(code) }

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envDuration(name string) time.Duration {
	d, err := time.ParseDuration(os.Getenv(name))
	if err != nil {
		return 0
	}
	return d
}
