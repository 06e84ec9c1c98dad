package loadtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progressCounts is where a run stands.
type progressCounts struct {
	total                                         int
	created, scheduled, bound, running, ready, un int64
	failed                                        int64
}

// done is how many pods have finished: Ready, unschedulable or refused.
func (c progressCounts) done() int64 { return c.ready + c.un + c.failed }

// progressBar reports a run's advance every period until ctx ends: on a terminal a bar redrawn in place
// with the rate and the ETA, otherwise a plain line each time.
type progressBar struct {
	w      io.Writer
	tty    bool
	period time.Duration
	counts func() progressCounts
}

// newProgressBar reports on stderr, as a bar when stderr is a terminal.
func newProgressBar(counts func() progressCounts) progressBar {
	tty := isTerminal(os.Stderr)
	period := time.Second
	if tty {
		period = 250 * time.Millisecond
	}
	return progressBar{w: os.Stderr, tty: tty, period: period, counts: counts}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// run reports until ctx ends; on a terminal it ends the bar's line.
func (p progressBar) run(ctx context.Context) {
	tick := time.NewTicker(p.period)
	defer tick.Stop()
	var r rateWindow
	r.add(time.Now(), 0)
	for {
		select {
		case <-ctx.Done():
			if p.tty {
				fmt.Fprintf(p.w, "\r\x1b[K%s\n", p.line(p.counts(), r.rate()))
			}
			return
		case now := <-tick.C:
			c := p.counts()
			r.add(now, c.done())
			if p.tty {
				fmt.Fprintf(p.w, "\r\x1b[K%s", p.line(c, r.rate()))
			} else {
				fmt.Fprintln(p.w, p.line(c, r.rate()))
			}
		}
	}
}

// line is one report: a bar on a terminal, counts per stage otherwise; then the rate and the ETA.
func (p progressBar) line(c progressCounts, rate float64) string {
	var b strings.Builder
	if p.tty {
		const width = 30
		filled := 0
		if c.total > 0 {
			filled = int(min(c.done(), int64(c.total)) * width / int64(c.total))
		}
		fmt.Fprintf(&b, "[%s%s] %d/%d ready, created %d", strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
			c.ready, c.total, c.created)
	} else {
		fmt.Fprintf(&b, "created %d scheduled %d bound %d running %d ready %d unschedulable %d of %d",
			c.created, c.scheduled, c.bound, c.running, c.ready, c.un, c.total)
	}
	fmt.Fprintf(&b, ", %.0f pods/s", rate)
	if left := int64(c.total) - c.done(); left > 0 && rate > 0 {
		fmt.Fprintf(&b, ", ETA %s", (time.Duration(float64(left)/rate) * time.Second).Round(time.Second))
	}
	return b.String()
}

// rateWindow is the rate of finished pods over the last few reports, so that the ETA follows the
// pipeline's current pace rather than its average since the start.
type rateWindow struct {
	at   []time.Time
	done []int64
}

const rateSamples = 8

func (r *rateWindow) add(at time.Time, done int64) {
	r.at, r.done = append(r.at, at), append(r.done, done)
	if len(r.at) > rateSamples {
		r.at, r.done = r.at[1:], r.done[1:]
	}
}

func (r *rateWindow) rate() float64 {
	n := len(r.at)
	if n < 2 {
		return 0
	}
	s := r.at[n-1].Sub(r.at[0]).Seconds()
	if s <= 0 {
		return 0
	}
	return float64(r.done[n-1]-r.done[0]) / s
}
