package webview

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/podbus/podbus/audit"
)

// timelineTimeout bounds the audit log reads of one timeline; maxTimelineRetries bounds how often a
// page asks again for a timeline the audit log has not caught up with.
const (
	timelineTimeout    = 15 * time.Second
	maxTimelineRetries = 10
)

func (v *View) handlePod(w http.ResponseWriter, r *http.Request) {
	v.writePage(w, "pod", struct{ Title, Namespace, Name string }{
		"pod " + r.PathValue("ns") + "/" + r.PathValue("name"), r.PathValue("ns"), r.PathValue("name")})
}

// spanView is a Gantt bar: its place and length in percent of the chart.
type spanView struct {
	audit.Span
	Left, Width, Dur string
}

type stepView struct{ Time, Gap, Actor, What string }

type timelineView struct {
	Self     string // this fragment's URL, for the next try
	Err      string
	Retry    bool // ask again shortly: the audit log has not caught up with the store
	Inc      *audit.Incarnation
	Summary  string
	Spans    []spanView
	Complete bool
	Steps    []stepView
}

// handleTimeline renders the pod's newest incarnation from the audit log (audit.Timeline) as a Gantt
// chart of audit.StagesOf and the list of its steps.
func (v *View) handleTimeline(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	ctx, cancel := context.WithTimeout(r.Context(), timelineTimeout)
	defer cancel()
	try, _ := strconv.Atoi(r.URL.Query().Get("try"))
	tv := timelineView{Self: r.URL.Path + "?try=" + strconv.Itoa(try+1)}
	stage, known := v.model.podStage(ns, name)
	incs, err := audit.Timeline(ctx, v.js, audit.TimelineOptions{Stream: v.cfg.AuditStream, Namespace: ns, Name: name})
	switch {
	case errors.Is(err, audit.ErrNotFound):
		tv.Err, tv.Retry = fmt.Sprintf("Pod %s/%s is not in the audit log.", ns, name), known
	case err != nil:
		v.log.Warn("web view: timeline", "pod", ns+"/"+name, "err", err)
		tv.Err = "Cannot read the audit log: " + err.Error()
	default:
		tv.fill(incs[0])
		// The log is sourced from the buckets and may trail the store by a moment.
		tv.Retry = known && stage == Ready && !tv.Complete
	}
	tv.Retry = tv.Retry && try < maxTimelineRetries
	v.writePage(w, "timeline", tv)
}

func (tv *timelineView) fill(in audit.Incarnation) {
	tv.Inc = &in
	tv.Summary = audit.PhasesOf(in).String()
	spans := audit.StagesOf(in)
	var first, last time.Time
	tv.Complete = true
	for _, s := range spans {
		if !s.OK {
			tv.Complete = false
			continue
		}
		if first.IsZero() || s.Start.Before(first) {
			first = s.Start
		}
		if s.End.After(last) {
			last = s.End
		}
	}
	total := last.Sub(first)
	for _, s := range spans {
		sv := spanView{Span: s}
		if s.OK && total > 0 {
			left := 100 * float64(s.Start.Sub(first)) / float64(total)
			width := max(100*float64(s.Duration())/float64(total), 0.4) // a zero-length stage stays visible
			sv.Left, sv.Width = fmt.Sprintf("%.2f", left), fmt.Sprintf("%.2f", min(width, 100-left+0.4))
			sv.Dur = fmtDuration(s.Duration())
		} else if s.OK {
			sv.Left, sv.Width, sv.Dur = "0", "0.4", fmtDuration(0)
		}
		tv.Spans = append(tv.Spans, sv)
	}
	var prev time.Time
	for _, s := range in.Steps {
		gap := ""
		if !prev.IsZero() {
			gap = fmt.Sprintf("%+.1f ms", float64(s.Time.Sub(prev))/float64(time.Millisecond))
		}
		prev = s.Time
		tv.Steps = append(tv.Steps, stepView{Time: s.Time.Local().Format("15:04:05.000"), Gap: gap, Actor: s.Actor, What: s.What})
	}
}
