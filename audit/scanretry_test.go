package audit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

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
	auditDecisions(ctx, t, c, n)

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

// laggingJS's consumers count pending messages as a consumer on a replica that lags behind the
// stream's leader would: none, whatever the leader holds.
type laggingJS struct{ jetstream.JetStream }

func (j laggingJS) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := j.JetStream.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	return laggingConsumer{c}, nil
}

type laggingConsumer struct{ jetstream.Consumer }

func (c laggingConsumer) Info(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	info, err := c.Consumer.Info(ctx)
	if err != nil {
		return nil, err
	}
	lagging := *info
	lagging.NumPending = 0
	return &lagging, nil
}

func (c laggingConsumer) Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	it, err := c.Consumer.Messages(opts...)
	if err != nil {
		return nil, err
	}
	return laggingMessages{it}, nil
}

type laggingMessages struct{ jetstream.MessagesContext }

func (it laggingMessages) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	m, err := it.MessagesContext.Next(opts...)
	if err != nil {
		return nil, err
	}
	return laggingMsg{m}, nil
}

type laggingMsg struct{ jetstream.Msg }

func (m laggingMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.Msg.Metadata()
	if err != nil {
		return nil, err
	}
	lagging := *md
	lagging.NumPending = 0
	return &lagging, nil
}

// A scan reads to the last record the stream's leader holds, not to where its consumer's replica says
// nothing is pending, with filters and without.
func TestScanReadsToTheLeadersEnd(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 5
	auditDecisions(ctx, t, c, n)
	tests := []struct {
		name    string
		filters []string
	}{
		{name: "filtered", filters: []string{bus.SubjPodScheduled}},
		{name: "the whole log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			read := 0
			err := audit.Scan(ctx, laggingJS{c.JS}, audit.ScanOptions{Filters: tt.filters}, func(*audit.Record) error { read++; return nil })
			if err != nil {
				t.Fatalf("scan: %v", err)
			}
			if read != n {
				t.Fatalf("read %d records, want %d", read, n)
			}
		})
	}
}

// auditDecisions publishes n scheduling decisions and waits until AUDIT holds them.
func auditDecisions(ctx context.Context, t *testing.T, c *bus.Conn, n int) {
	t.Helper()
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
		return err == nil && info.State.Msgs >= uint64(n)
	}, "the AUDIT stream holds %d decisions", n)
}
