package nodelifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// A watch that ends while running is opened again on fresh caches and deadlines, and Run goes on.
func TestRunRelistsWhenAWatchEnds(t *testing.T) {
	_, conn := bustest.Start(t)
	s, err := New(Config{ID: "n"}, conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := 0
	s.session = func(ctx context.Context) error {
		calls++
		if len(s.nodes)+len(s.pods)+len(s.byNode)+len(s.pending)+len(s.timers) != 0 {
			t.Errorf("session %d started on the last one's state", calls)
		}
		s.nodes["n1"], s.pods["default/p"], s.byNode["n1"] = &cachedNode{}, cachedPod{}, map[string]bool{"default/p": true}
		s.pending["default/p"] = time.Now()
		s.timers = append(s.timers, deadline{key: "default/p"})
		if calls == 1 {
			return fmt.Errorf("nodelifecycle: %w: pods", bus.ErrWatchEnded)
		}
		cancel()
		<-ctx.Done()
		return nil
	}
	if err := s.Run(ctx); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if calls != 2 {
		t.Errorf("%d sessions, want 2", calls)
	}
}
