package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/metrics"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// publishers are the two ways the pipeline stores a message and waits for it: each returns the
// acknowledgement when it has one.
var publishers = []struct {
	name    string
	publish func(c *bus.Conn, subject string, meta bus.Meta) (*jetstream.PubAck, error)
}{
	{"batcher", func(c *bus.Conn, subject string, meta bus.Meta) (*jetstream.PubAck, error) {
		f, err := bus.NewBatcher(c.JS, "test/1").PublishAsync(subject, &pb.PodDeleted{Uid: "u1"}, meta)
		if err != nil {
			return nil, err
		}
		select {
		case ack := <-f.Ok():
			return ack, nil
		case err := <-f.Err():
			return nil, err
		case <-time.After(20 * time.Second):
			return nil, fmt.Errorf("no answer to the publish")
		}
	}},
	{"publisher", func(c *bus.Conn, subject string, meta bus.Meta) (*jetstream.PubAck, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return nil, bus.NewPublisher(c.JS, "test/1").Publish(ctx, subject, &pb.PodDeleted{Uid: "u1"}, meta) // no acknowledgement to read
	}},
}

// While the stream's leader says a copy with a message's de-duplication id is still being stored (a
// resend after a lost acknowledgement, or another controller replica sending the same command), the
// batcher and the publisher send the message again until the answer settles: the copy's
// acknowledgement, or this message stored when the copy was dropped with its leader. A message without
// an id could be stored twice, so it is not sent again.
func TestPublishWaitsForACopyBeingStored(t *testing.T) {
	const (
		inProcess = `{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}`
		wrongLast = `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}`
	)
	tests := []struct {
		name     string
		id       string
		answers  []string
		wantSeq  uint64
		wantDup  bool
		wantCopy bool // the error is StoringCopy
		wantErr  bool
	}{
		{name: "the copy is stored", id: "m1", answers: []string{inProcess, inProcess, `{"stream":"FAKE","seq":7,"duplicate":true}`}, wantSeq: 7, wantDup: true},
		{name: "the copy is dropped with its leader", id: "m2", answers: []string{inProcess, `{"stream":"FAKE","seq":8}`}, wantSeq: 8},
		{name: "no id", answers: []string{inProcess}, wantErr: true, wantCopy: true},
		{name: "refused", id: "m3", answers: []string{wrongLast}, wantErr: true},
	}
	_, c := bustest.Start(t)
	for pi, p := range publishers {
		for i, tt := range tests {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				subject := fmt.Sprintf("fake.stream.%d.%d", pi, i)
				var mu sync.Mutex
				asked := 0
				sub, err := c.NC.Subscribe(subject, func(m *nats.Msg) {
					mu.Lock()
					n := asked
					asked++
					mu.Unlock()
					if n < len(tt.answers) {
						_ = m.Respond([]byte(tt.answers[n]))
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = sub.Unsubscribe() }()
				if err := c.NC.Flush(); err != nil {
					t.Fatal(err)
				}

				ack, err := p.publish(c, subject, bus.Meta{MsgID: tt.id})
				switch {
				case tt.wantErr && err == nil:
					t.Fatalf("stored, want an error")
				case tt.wantErr:
					if bus.StoringCopy(err) != tt.wantCopy {
						t.Errorf("StoringCopy(%v) = %v, want %v", err, !tt.wantCopy, tt.wantCopy)
					}
				case err != nil:
					t.Fatalf("publish: %v", err)
				case ack != nil && (ack.Sequence != tt.wantSeq || ack.Duplicate != tt.wantDup):
					t.Errorf("ack seq %d duplicate %v, want %d %v", ack.Sequence, ack.Duplicate, tt.wantSeq, tt.wantDup)
				}
				mu.Lock()
				defer mu.Unlock()
				if asked != len(tt.answers) {
					t.Errorf("sent %d times, want %d", asked, len(tt.answers))
				}
			})
		}
	}
}

// A message that no stream answers (no responders: a stream's leader still being chosen) was stored by
// none, so it is sent again, id or not, until a stream takes it: longer than nats.go's two retries.
func TestPublishWaitsForAStream(t *testing.T) {
	_, c := bustest.Start(t)
	for i, p := range publishers {
		t.Run(p.name, func(t *testing.T) {
			subject := fmt.Sprintf("fake.stream.late.%d", i)
			before := metrics.Counter("publish.no_stream")
			type result struct {
				ack *jetstream.PubAck
				err error
			}
			done := make(chan result, 1)
			go func() {
				ack, err := p.publish(c, subject, bus.Meta{})
				done <- result{ack, err}
			}()
			// The stream comes after nats.go's two retries would have given up.
			bustest.Eventually(t, 10*time.Second, func() bool { return metrics.Counter("publish.no_stream") >= before+3 }, "the publish finds no stream three times")
			sub, err := c.NC.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(`{"stream":"FAKE","seq":3}`)) })
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			r := <-done
			if r.err != nil {
				t.Fatalf("publish: %v", r.err)
			}
			if r.ack != nil && r.ack.Sequence != 3 {
				t.Errorf("stored as %d, want 3", r.ack.Sequence)
			}
		})
	}
}

// A group whose acknowledgement did not come is sent again, with the time left of the batcher's
// publish TTL: with its de-duplication id, a copy stored after all makes it a duplicate.
func TestBatcherSendsAgainAfterALostAnswer(t *testing.T) {
	_, c := bustest.Start(t)
	const subject = "fake.stream.lost"
	var mu sync.Mutex
	asked := 0
	sub, err := c.NC.Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if asked++; asked > 1 { // the first answer is lost
			_ = m.Respond([]byte(`{"stream":"FAKE","seq":4,"duplicate":true}`))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	ack, err := publishers[0].publish(c, subject, bus.Meta{MsgID: "m1"})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ack.Sequence != 4 || !ack.Duplicate {
		t.Errorf("ack seq %d duplicate %v, want 4 true", ack.Sequence, ack.Duplicate)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 2 {
		t.Errorf("sent %d times, want 2", asked)
	}
}

// A batcher sends a group again while no stream answers for as long as its publish TTL, and then
// gives up with ErrNoStreamResponse.
func TestBatcherPublishTTL(t *testing.T) {
	tests := []struct {
		name     string
		ttl      time.Duration
		streamIn time.Duration // when the stream starts answering; 0: never
		wantErr  error
	}{
		{name: "no stream within the TTL", ttl: time.Second, wantErr: jetstream.ErrNoStreamResponse},
		{name: "the stream comes within a longer TTL", ttl: 4 * time.Second, streamIn: 1500 * time.Millisecond},
	}
	_, c := bustest.Start(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subject := fmt.Sprintf("fake.stream.ttl.%d", i)
			start := time.Now()
			f, err := bus.NewBatcher(c.JS, "test/1", bus.WithPublishTTL(tt.ttl)).PublishAsync(subject, &pb.PodDeleted{Uid: "u1"}, bus.Meta{MsgID: "m1"})
			if err != nil {
				t.Fatal(err)
			}
			if tt.streamIn > 0 {
				time.AfterFunc(tt.streamIn, func() {
					_, _ = c.NC.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond([]byte(`{"stream":"FAKE","seq":5}`)) })
				})
			}
			select {
			case ack := <-f.Ok():
				if tt.wantErr != nil {
					t.Fatalf("stored as %d, want %v", ack.Sequence, tt.wantErr)
				}
			case err := <-f.Err():
				if !errors.Is(err, tt.wantErr) || tt.wantErr == nil {
					t.Fatalf("publish: %v, want %v", err, tt.wantErr)
				}
				if took := time.Since(start); took < tt.ttl-pubRetryWaitSlack {
					t.Errorf("gave up after %v, before the TTL %v", took, tt.ttl)
				}
			case <-time.After(tt.ttl + 10*time.Second):
				t.Fatal("no answer to the publish")
			}
		})
	}
}

// pubRetryWaitSlack is how much earlier than its TTL a batcher may give up: it does not start a wait
// that would end after it.
const pubRetryWaitSlack = 300 * time.Millisecond
