package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
)

// A session that ends with ErrWatchEnded runs again after a reset; any other error ends Relist with
// it, and a stop ends it with nil, also while it pauses.
func TestRelist(t *testing.T) {
	errOther := errors.New("bucket gone")
	ended := fmt.Errorf("svc: %w: pods", bus.ErrWatchEnded)
	tests := []struct {
		name        string
		sessions    []error // what each session returns; after the last, the test stops Relist
		stopAtReset bool    // stop at the first reset instead, before the pause
		want        error
		runs        int // sessions run
		resets      int
	}{
		{"ended twice, then stopped", []error{ended, ended}, false, nil, 3, 2},
		{"another error", []error{ended, errOther}, false, errOther, 2, 1},
		{"stopped before the pause", []error{ended, ended}, true, nil, 1, 1},
		{"stopped with the watch's end", []error{context.Canceled}, false, nil, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			calls, resets := 0, 0
			session := func(ctx context.Context) error {
				if calls != resets {
					t.Errorf("session %d after %d resets", calls+1, resets)
				}
				calls++
				if calls <= len(tt.sessions) {
					if errors.Is(tt.sessions[calls-1], context.Canceled) {
						cancel()
					}
					return tt.sessions[calls-1]
				}
				cancel()
				<-ctx.Done()
				return nil
			}
			reset := func() {
				resets++
				if tt.stopAtReset {
					cancel()
				}
			}
			err := bus.Relist(ctx, slog.New(slog.DiscardHandler), session, reset)
			if !errors.Is(err, tt.want) {
				t.Errorf("Relist = %v, want %v", err, tt.want)
			}
			if calls != tt.runs {
				t.Errorf("%d sessions, want %d", calls, tt.runs)
			}
			if resets != tt.resets {
				t.Errorf("%d resets, want %d", resets, tt.resets)
			}
		})
	}
}
