package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Conn is a service's connection: core NATS for request/reply and JetStream for everything durable.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream

	stop context.CancelFunc // ends the connection's own goroutines; nil when it has none
}

// Connect dials NATS and keeps reconnecting forever, so a service survives a NATS node going away.
// name identifies the service replica in the server's connection list. Given several servers, the
// connection also moves off one that is cut off from the rest of its cluster (watchIsolation) until
// Close.
func Connect(ctx context.Context, url, name string, extra ...nats.Option) (*Conn, error) {
	if url == "" {
		url = nats.DefaultURL
	}
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(64 << 20),
		// A refused publish or subscription (NATS permissions) is reported only here: log it, or a
		// misconfigured credential would look like a silent stall.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				slog.Warn("nats", "connection", name, "subject", sub.Subject, "err", err)
				return
			}
			slog.Warn("nats", "connection", name, "err", err)
		}),
	}, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	// RetryOnFailedConnect returns at once; wait here, bounded by ctx, so callers start on a live link.
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, fmt.Errorf("connect to nats %s: %w", url, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// An async publish whose ack never comes (a reconnect lost it) fails after 10s instead of hanging its handler.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	c := &Conn{NC: nc, JS: js}
	if serverCount(url) > 1 {
		// Not ctx: that bounds the dial, and the watch lasts as long as the connection.
		wctx, stop := context.WithCancel(context.Background())
		c.stop = stop
		go watchIsolation(wctx, nc, name)
	}
	return c, nil
}

// InProcess connects to an embedded server without a socket: the same protocol over an in-memory pipe,
// which saves two system calls per message when every service runs in one process (`podbus up`).
func InProcess(srv nats.InProcessConnProvider) nats.Option { return nats.InProcessServer(srv) }

// PlainURL is url with its tls:// scheme (if any) replaced by nats://: the address of an in-process
// connection, which must not ask for TLS.
func PlainURL(url string) string {
	if rest, ok := strings.CutPrefix(url, "tls://"); ok {
		return "nats://" + rest
	}
	return url
}

// Close drains the connection: subscriptions finish what they hold, pending publishes are flushed.
func (c *Conn) Close() {
	if c == nil || c.NC == nil {
		return
	}
	if c.stop != nil {
		c.stop()
	}
	if err := c.NC.Drain(); err != nil {
		c.NC.Close()
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for !c.NC.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c.NC.Close()
}

// ErrNotFound is returned by the store helpers when a key does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a compare-and-set lost against a concurrent writer.
var ErrConflict = errors.New("revision conflict")
