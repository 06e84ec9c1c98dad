// Package ctxtime waits for a time or a context, whichever ends first.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done; false if ctx is. A d of zero or less only checks ctx.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
