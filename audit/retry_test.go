package audit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// A request that gets no answer is sent again; one that gets an answer, even an error, is not.
func TestRetry(t *testing.T) {
	unavailable := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	for _, tc := range []struct {
		name      string
		first     error // the first attempt's error, when it does not hang
		hang      bool  // the first attempt gets no answer until its deadline
		wantCalls int
		wantErr   error
	}{
		{name: "answered", wantCalls: 1},
		{name: "no answer in time", hang: true, wantCalls: 2},
		{name: "no responders", first: nats.ErrNoResponders, wantCalls: 2},
		{name: "nats timeout", first: nats.ErrTimeout, wantCalls: 2},
		{name: "JetStream unavailable", first: unavailable, wantCalls: 2},
		{name: "an answer that is an error", first: jetstream.ErrStreamNotFound, wantCalls: 1, wantErr: jetstream.ErrStreamNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			calls := 0
			v, err := audit.Retry(ctx, 50*time.Millisecond, func(ctx context.Context) (int, error) {
				calls++
				if calls == 1 && tc.hang {
					<-ctx.Done()
					return 0, ctx.Err()
				}
				if calls == 1 && tc.first != nil {
					return 0, tc.first
				}
				return 7, nil
			})
			if calls != tc.wantCalls {
				t.Errorf("%d calls, want %d", calls, tc.wantCalls)
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || v != 7 {
				t.Fatalf("got %d, %v; want 7", v, err)
			}
		})
	}
}

// Retry stops when its caller's context ends, with that context's error.
func TestRetryStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	calls := 0
	_, err := audit.Retry(ctx, 50*time.Millisecond, func(ctx context.Context) (int, error) {
		calls++
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
		t.Fatalf("error %v after the caller's context ended (%v)", err, ctx.Err())
	}
	if calls < 2 {
		t.Fatalf("%d calls: the attempts had no deadline of their own", calls)
	}
}

// lossyJS loses the first consumer create and the first consumer info of a scan: each waits for its
// deadline, as a request does that reaches a server during a leader election.
type lossyJS struct {
	jetstream.JetStream
	creates, infos atomic.Int32
}

func (j *lossyJS) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	if j.creates.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c, err := j.JetStream.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	return &lossyConsumer{Consumer: c, js: j}, nil
}

type lossyConsumer struct {
	jetstream.Consumer
	js *lossyJS
}

func (c *lossyConsumer) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	if c.js.infos.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.Consumer.Info(ctx)
}

// A scan whose requests get no answer sends them again and reads the whole log, well within its
// caller's deadline.
func TestScanSendsLostRequestsAgain(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 5
	b := bus.NewBatcher(c.JS, "scheduler/a")
	for i := range n {
		uid := fmt.Sprintf("u%d", i)
		if err := b.Publish(ctx, bus.SubjPodScheduled, &pb.SchedulingDecision{Uid: uid, Node: "n1"}, bus.Meta{PodUID: uid}); err != nil {
			t.Fatal(err)
		}
	}
	bustest.Eventually(t, 10*time.Second, func() bool {
		st, err := c.JS.Stream(ctx, bus.StreamAudit)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs >= n
	}, "the AUDIT stream holds %d decisions", n)

	js := &lossyJS{JetStream: c.JS}
	read := 0
	err := audit.Scan(ctx, js, audit.ScanOptions{Filters: []string{bus.SubjPodScheduled}, RequestTimeout: 200 * time.Millisecond},
		func(*audit.Record) error { read++; return nil })
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	if read != n {
		t.Fatalf("read %d records, want %d", read, n)
	}
	if creates, infos := js.creates.Load(), js.infos.Load(); creates != 2 || infos != 2 {
		t.Fatalf("%d consumer creates and %d infos, want 2 of each (one lost, one answered)", creates, infos)
	}
}
