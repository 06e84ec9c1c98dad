package loadtest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/syncbuf"
)

func TestProgressLine(t *testing.T) {
	c := progressCounts{total: 100, created: 60, scheduled: 55, bound: 50, running: 45, ready: 40, un: 5, failed: 5}
	tests := []struct {
		name string
		tty  bool
		rate float64
		want []string
		not  []string
	}{
		{"terminal", true, 10, []string{"[" + strings.Repeat("=", 15) + strings.Repeat(" ", 15) + "]", "40/100 ready", "10 pods/s", "ETA 5s"}, []string{"\n", "scheduled"}},
		{"plain", false, 10, []string{"created 60 scheduled 55 bound 50 running 45 ready 40 unschedulable 5 of 100", "ETA 5s"}, []string{"\r", "["}},
		{"no rate yet: no ETA", false, 0, []string{"0 pods/s"}, []string{"ETA"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := progressBar{tty: tt.tty}.line(c, tt.rate)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("line %q lacks %q", got, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(got, w) {
					t.Errorf("line %q has %q", got, w)
				}
			}
		})
	}
}

// syncbuf.Buffer is a bytes.Buffer the reporter writes to while the test reads it.

// Off a terminal the reporter writes whole lines, with no carriage returns or escapes.
func TestProgressPlainLines(t *testing.T) {
	var out syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	p := progressBar{w: &out, period: time.Millisecond, counts: func() progressCounts { return progressCounts{total: 10, ready: 3} }}
	var wg sync.WaitGroup
	wg.Go(func() { p.run(ctx) })
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "\n") < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	got := out.String()
	if strings.Count(got, "\n") < 2 {
		t.Fatalf("no lines within the deadline: %q", got)
	}
	if strings.ContainsAny(got, "\r\x1b") {
		t.Errorf("plain output has terminal controls: %q", got)
	}
	if !strings.Contains(got, "ready 3 unschedulable 0 of 10") {
		t.Errorf("output %q lacks the counts", got)
	}
}
