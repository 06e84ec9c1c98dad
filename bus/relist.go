package bus

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/podbus/podbus/internal/ctxtime"
)

// ErrWatchEnded is what a watching session returns when a bucket's watch stopped while running. A
// watch of a Bucket resumes when nats.go gives its consumer up (resume.go); one still ends with a
// closed connection, or as a hub watcher that could not catch up.
var ErrWatchEnded = errors.New("watch ended")

// RelistPause is how long Relist waits before watching again, so a server that refuses every new
// consumer is not asked in a tight loop.
const RelistPause = time.Second

// Relist runs session until ctx ends, as an informer relists: a session that ends with ErrWatchEnded
// is run again after reset has emptied the state it built and a pause. Any other error ends Relist
// with it; a stop ends it with nil.
func Relist(ctx context.Context, log *slog.Logger, session func(context.Context) error, reset func()) error {
	for {
		err := session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, ErrWatchEnded) {
			return err
		}
		log.Warn("a watch ended; watching again", "err", err)
		reset()
		if !ctxtime.Sleep(ctx, RelistPause) {
			return nil
		}
	}
}
