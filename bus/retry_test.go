package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
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
		{name: "no stream answered", first: jetstream.ErrNoStreamResponse, wantCalls: 2},
		{name: "JetStream unavailable", first: unavailable, wantCalls: 2},
		{name: "JetStream off", first: &jetstream.APIError{Code: 503, ErrorCode: 10039, Description: "jetstream not enabled for account"}, wantCalls: 1, wantErr: jetstream.ErrJetStreamNotEnabledForAccount},
		{name: "an answer that is an error", first: jetstream.ErrStreamNotFound, wantCalls: 1, wantErr: jetstream.ErrStreamNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			calls := 0
			v, err := bus.Retry(ctx, 50*time.Millisecond, func(ctx context.Context) (int, error) {
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
	_, err := bus.Retry(ctx, 50*time.Millisecond, func(ctx context.Context) (int, error) {
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

// lossyKV loses its first read: it waits for its deadline, as a read does that the server under the
// connection drops as it stops.
type lossyKV struct {
	jetstream.KeyValue
	reads atomic.Int32
}

func (k *lossyKV) lost(ctx context.Context) bool {
	if k.reads.Add(1) == 1 {
		<-ctx.Done()
		return true
	}
	return false
}

func (k *lossyKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.lost(ctx) {
		return nil, ctx.Err()
	}
	return k.KeyValue.Get(ctx, key)
}

func (k *lossyKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	if k.lost(ctx) {
		return nil, ctx.Err()
	}
	return k.KeyValue.Status(ctx)
}

// A read with a long deadline (an API request's) that gets no answer is sent again after
// DefaultRequestTimeout instead of waiting for the whole deadline.
func TestReadSentAgain(t *testing.T) {
	_, c := bustest.Start(t)
	setup, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := c.JS.CreateKeyValue(setup, jetstream.KeyValueConfig{Bucket: "lossy"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(setup, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		read func(context.Context, jetstream.KeyValue) error
	}{
		{name: "a key", read: func(ctx context.Context, kv jetstream.KeyValue) error {
			data, rev, err := bus.GetEncoded(ctx, kv, "k")
			if err == nil && (string(data) != "v" || rev == 0) {
				err = fmt.Errorf("got %q at %d, want v", data, rev)
			}
			return err
		}},
		{name: "the store's revision", read: func(ctx context.Context, kv jetstream.KeyValue) error {
			rev, err := bus.StoreRevision(ctx, kv)
			if err == nil && rev == 0 {
				err = errors.New("revision 0")
			}
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lossy := &lossyKV{KeyValue: kv}
			if err := tt.read(ctx, lossy); err != nil {
				t.Fatal(err)
			}
			if n := lossy.reads.Load(); n != 2 {
				t.Fatalf("%d reads, want 2 (one lost, one answered)", n)
			}
		})
	}
}
