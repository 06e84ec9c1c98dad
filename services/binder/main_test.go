package binder

import (
	"log/slog"
	"os"
	"testing"
)

// TestMain keeps the per-decision info logs out of test output.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}
