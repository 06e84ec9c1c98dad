package admission

import (
	"context"
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

// The streaming libraries log through klog, to stderr unless told otherwise, and a client closing its
// connection is an error there. Their messages go to the API's log at debug level instead.
var klogOnce sync.Once

func (s *Service) quietStreamLibraries() {
	klogOnce.Do(func() { klog.SetSlogLogger(slog.New(debugHandler{s.log.Handler()})) })
}

// debugHandler logs every record at debug level.
type debugHandler struct{ slog.Handler }

func (h debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

func (h debugHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return debugHandler{h.Handler.WithAttrs(as)}
}

func (h debugHandler) WithGroup(name string) slog.Handler {
	return debugHandler{h.Handler.WithGroup(name)}
}
