package ctxtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/podbus/podbus/internal/ctxtime"
)

func TestSleep(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want bool
	}{
		{name: "waits", ctx: context.Background(), d: time.Millisecond, want: true},
		{name: "nothing to wait", ctx: context.Background(), d: 0, want: true},
		{name: "context done", ctx: done, d: time.Hour, want: false},
		{name: "context done, nothing to wait", ctx: done, d: -time.Second, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ctxtime.Sleep(tt.ctx, tt.d); got != tt.want {
				t.Errorf("Sleep = %v, want %v", got, tt.want)
			}
		})
	}
}
