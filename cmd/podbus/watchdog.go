package main

import (
	"context"
	"fmt"
	"log/slog"
)

// errConsumerStopped ends a service whose durable consumer stopped pulling. bus.Work stops on any pull
// error, including a missed heartbeat after a NATS node leaves (the consumer's leader moved); most services
// then return from Run, but the agent waits for its pod workers, which run until shutdown, and would sit
// there healthy and idle. Ending the process instead lets the container's restart policy bring it back.
var errConsumerStopped = fmt.Errorf("a consumer stopped pulling; exiting so the supervisor restarts this service")

// pullWatchdog is a slog handler that passes every record on and cancels the service on "pull failed".
type pullWatchdog struct {
	slog.Handler
	cancel context.CancelCauseFunc
}

func (w pullWatchdog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError && r.Message == "pull failed" {
		w.cancel(errConsumerStopped)
	}
	return w.Handler.Handle(ctx, r)
}

func (w pullWatchdog) WithAttrs(as []slog.Attr) slog.Handler {
	return pullWatchdog{w.Handler.WithAttrs(as), w.cancel}
}

func (w pullWatchdog) WithGroup(name string) slog.Handler {
	return pullWatchdog{w.Handler.WithGroup(name), w.cancel}
}
