// Package bustest starts an embedded nats-server per test, on a random port, with t.TempDir storage.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/podbus/podbus/bus"
)

// Server starts a JetStream server for t and returns it with its client URL.
func Server(t testing.TB) (*server.Server, string) {
	t.Helper()
	s, err := bus.RunServer(bus.ServerConfig{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s, s.ClientURL()
}

// Conn connects to url and provisions podbus's streams and buckets.
func Conn(t testing.TB, url, name string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, url, name)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.NC.Close)
	if err := bus.Provision(ctx, c.JS, bus.Options{}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	return c
}

// Start is Server + Conn.
func Start(t testing.TB) (*server.Server, *bus.Conn) {
	t.Helper()
	s, url := Server(t)
	return s, Conn(t, url, t.Name())
}

// Eventually polls cond until it is true or the deadline passes, then fails with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
