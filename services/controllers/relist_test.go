package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// A watch that ends while running is opened again with fresh state; any other error ends Run, and a
// stop ends it without one.
func TestRunRelistsWhenAWatchEnds(t *testing.T) {
	_, conn := bustest.Start(t)
	errOther := errors.New("bucket gone")
	tests := []struct {
		name     string
		sessions []error // what each session returns; after the last, it waits for the stop
		want     error
	}{
		{"ended twice, then stopped", []error{fmt.Errorf("%w: pods", bus.ErrWatchEnded), fmt.Errorf("%w: nodes", bus.ErrWatchEnded)}, nil},
		{"another error", []error{fmt.Errorf("%w: pods", bus.ErrWatchEnded), errOther}, errOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{ID: "c"}, conn)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			calls := 0
			s.session = func(ctx context.Context) error {
				if len(s.pods) != 0 || len(s.dirtyGC) != 0 {
					t.Errorf("session %d started on the last one's state", calls)
				}
				s.pods["p"], s.dirtyGC["u"] = &podEntry{}, true
				calls++
				if calls <= len(tt.sessions) {
					return tt.sessions[calls-1]
				}
				cancel()
				<-ctx.Done()
				return nil
			}
			if err := s.Run(ctx); !errors.Is(err, tt.want) {
				t.Errorf("Run = %v, want %v", err, tt.want)
			}
			want := len(tt.sessions)
			if tt.want == nil {
				want++
			}
			if calls != want {
				t.Errorf("%d sessions, want %d", calls, want)
			}
		})
	}
}
