// Package bustest starts an embedded nats-server per test, on a random port, with t.TempDir storage.
package bustest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

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

// Messages returns every message still in stream whose subject matches filter ("*" and ">" wildcards),
// the entries of a batch (bus.Batcher) as messages of their own with the batch's sequence.
func Messages(t testing.TB, c *bus.Conn, stream, filter string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := c.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range unbatch(t, m) {
			if bus.SubjectMatches(filter, e.Subject) {
				out = append(out, e)
			}
		}
	}
	return out
}

func unbatch(t testing.TB, m *jetstream.RawStreamMsg) []*jetstream.RawStreamMsg {
	t.Helper()
	entries, err := bus.Unbatch(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatalf("stream message %d on %s: %v", m.Sequence, m.Subject, err)
	}
	out := make([]*jetstream.RawStreamMsg, len(entries))
	for i, e := range entries {
		c := *m
		c.Subject, c.Header, c.Data = e.Subject, e.Header, e.Data
		out[i] = &c
	}
	return out
}

// LastMsg returns the last message on subject in stream (the last entry of a batch), or nil when there
// is none.
func LastMsg(t testing.TB, c *bus.Conn, stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	// Read whole: the entry may be in a batch of its group's subject (events), not the last one there.
	all := Messages(t, c, stream, subject)
	if len(all) == 0 {
		return nil
	}
	return all[len(all)-1]
}

// Drained reports whether a durable consumer has handled and acknowledged everything on its stream
// that its filters take. The consumer's own pending count is not enough: the server counts a message
// new to the stream asynchronously, so right after a publish it may still say nothing is pending.
// The last message of each filter must be under the consumer's ack floor too.
func Drained(c *bus.Conn, stream, durable string) bool {
	ctx := context.Background()
	cons, err := c.JS.Consumer(ctx, stream, durable)
	if err != nil {
		return false
	}
	info, err := cons.Info(ctx)
	if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
		return false
	}
	filters := info.Config.FilterSubjects
	if f := info.Config.FilterSubject; f != "" {
		filters = append(filters, f)
	}
	if len(filters) == 0 {
		filters = []string{">"}
	}
	st, err := c.JS.Stream(ctx, stream)
	if err != nil {
		return false
	}
	for _, f := range filters {
		m, err := st.GetLastMsgForSubject(ctx, f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil || info.AckFloor.Stream < m.Sequence {
			return false
		}
	}
	return true
}

// Decode unmarshals a stored message into into, failing the test if it does not decode.
func Decode[T proto.Message](t testing.TB, m *jetstream.RawStreamMsg, into T) T {
	t.Helper()
	if err := proto.Unmarshal(m.Data, into); err != nil {
		t.Fatalf("decode %T from %s: %v", into, m.Subject, err)
	}
	return into
}

// StreamInfo is stream's info, read now.
func StreamInfo(t testing.TB, c *bus.Conn, stream string) *jetstream.StreamInfo {
	t.Helper()
	st, err := c.JS.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// Consumers is the number of consumers on stream (a bucket's is bus.KVStream of it).
func Consumers(t testing.TB, c *bus.Conn, stream string) int {
	t.Helper()
	return StreamInfo(t, c, stream).State.Consumers
}
