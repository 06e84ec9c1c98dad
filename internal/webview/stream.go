package webview

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Pacing of the stream: at most one update per streamThrottle, a re-render each streamTick so rates
// decay while nothing changes, and a comment after streamKeepAlive of silence for proxies.
const (
	streamThrottle  = 250 * time.Millisecond
	streamTick      = time.Second
	streamKeepAlive = 15 * time.Second
)

// fragments are the parts of the index page the stream replaces, by SSE event name.
var fragments = []string{"pipeline", "nodes", "unschedulable", "events"}

// handleStream sends server-sent events: for the index page, each fragment when its HTML changes;
// with ?pod=<ns>/<name>, a "pod" event carrying the pod's stage each time that changes.
func (v *View) handleStream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	ns, name, onePod := strings.Cut(r.URL.Query().Get("pod"), "/")
	last := map[string]string{}
	lastWrite := time.Now()
	tick := time.NewTicker(streamTick)
	defer tick.Stop()
	for {
		changed := v.model.wait()
		var b strings.Builder
		if onePod {
			stage := "unknown"
			if s, ok := v.model.podStage(ns, name); ok {
				stage = s.String()
			}
			if last["pod"] != stage {
				last["pod"] = stage
				writeEvent(&b, "pod", stage)
			}
		} else {
			snap := v.model.snapshot()
			for _, f := range fragments {
				html, err := render(f, snap)
				if err != nil {
					v.log.Error("web view", "err", err)
					return
				}
				if last[f] != html {
					last[f] = html
					writeEvent(&b, f, html)
				}
			}
		}
		if b.Len() == 0 && time.Since(lastWrite) >= streamKeepAlive {
			b.WriteString(":\n\n")
		}
		if b.Len() > 0 {
			if _, err := w.Write([]byte(b.String())); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			lastWrite = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
		select { // let a burst of changes gather into one update
		case <-ctx.Done():
			return
		case <-time.After(streamThrottle):
		}
	}
}

// writeEvent appends one event in the text/event-stream format: a data line per line of data.
func writeEvent(b *strings.Builder, name, data string) {
	fmt.Fprintf(b, "event: %s\n", name)
	for line := range strings.SplitSeq(data, "\n") {
		fmt.Fprintf(b, "data: %s\n", line)
	}
	b.WriteString("\n")
}
