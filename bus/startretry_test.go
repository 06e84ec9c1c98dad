package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A start that gets no answer for longer than retryTries failures waits on; answered failures, and
// JetStream being off, give up after retryTries.
func TestRetryCountsOnlyAnsweredFailures(t *testing.T) {
	election := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	repeat := func(err error, n int) []error {
		out := make([]error, n)
		for i := range out {
			out[i] = err
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		errs      []error // the failures before f succeeds; f fails with the last one forever when fail is set
		fail      bool
		wantCalls int
		wantErr   error
	}{
		{name: "no answer beyond the tries", errs: repeat(nats.ErrTimeout, 3*retryTries), wantCalls: 3*retryTries + 1},
		{name: "an election beyond the tries", errs: repeat(error(election), 2*retryTries), wantCalls: 2*retryTries + 1},
		{name: "cut off, then answered failures", errs: append(repeat(nats.ErrDisconnected, retryTries), repeat(jetstream.ErrStreamNotFound, retryTries-1)...), wantCalls: 2 * retryTries},
		{name: "answered failures give up", errs: []error{jetstream.ErrStreamNotFound}, fail: true, wantCalls: retryTries, wantErr: jetstream.ErrStreamNotFound},
		{name: "JetStream off gives up", errs: []error{jetstream.ErrJetStreamNotEnabled}, fail: true, wantCalls: retryTries, wantErr: jetstream.ErrJetStreamNotEnabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryPaced(context.Background(), "test", noPause, func(context.Context) error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				if tc.fail {
					return tc.errs[len(tc.errs)-1]
				}
				return nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("retry: %v, want %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("retry called f %d times, want %d", calls, tc.wantCalls)
			}
		})
	}
}

// Without an answer retry waits only as long as its context.
func TestRetryEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := retryPaced(ctx, "test", noPause, func(context.Context) error {
		if calls++; calls == 100 {
			cancel()
		}
		return nats.ErrTimeout
	})
	if !errors.Is(err, context.Canceled) || calls != 100 {
		t.Errorf("retry: %v after %d calls, want context.Canceled after 100", err, calls)
	}
}

var noPause = retryPacing{answered: func(int) time.Duration { return 0 }}

// A try that gets no answer is cut at its own deadline and sent again, however long the caller's
// context lasts.
func TestRetryCutsATryWithoutAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := 0
	p := noPause
	p.try = 50 * time.Millisecond
	err := retryPaced(ctx, "test", p, func(ctx context.Context) error {
		if calls++; calls < 3 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("retry: %v after %d calls, want success after 3", err, calls)
	}
}
