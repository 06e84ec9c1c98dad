package bus

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultRequestTimeout bounds one attempt of a request sent through Retry.
const DefaultRequestTimeout = jsAPITimeout

// Retry calls do with a deadline of its own (d, or DefaultRequestTimeout) until it returns an answer
// or an error other than no answer, or ctx ends. In a cluster a request that reaches a server during a
// leader election, or that the server under this connection drops as it stops, gets no answer; nats.go
// then waits for ctx's whole deadline (a minute for an API request), while the same request sent
// again is answered at once. Only requests that may be repeated (reads) belong here: a
// compare-and-set whose answer was lost would be refused the second time.
func Retry[T any](ctx context.Context, d time.Duration, do func(context.Context) (T, error)) (T, error) {
	return retryUnanswered(ctx, "", d, pubRetryWait, do)
}

// retryLogEvery is how often a retry that names what it waits for says that it still gets no answer.
const retryLogEvery = 15 * time.Second

// retryUnanswered is Retry, pausing wait after an immediate refusal. When what is set, it says every
// retryLogEvery that it still gets no answer: a credential that may not send the request gets none
// either, so the line names what is waited for.
func retryUnanswered[T any](ctx context.Context, what string, d, wait time.Duration, do func(context.Context) (T, error)) (T, error) {
	if d <= 0 {
		d = DefaultRequestTimeout
	}
	start := time.Now()
	logged := start
	for try := start; ; try = time.Now() {
		actx, cancel := context.WithTimeout(ctx, d)
		v, err := do(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !Unanswered(err) {
			return v, err
		}
		if what != "" && time.Since(logged) >= retryLogEvery {
			logged = time.Now()
			slog.Warn("no answer from JetStream; still trying", "what", what, "for", time.Since(start).Round(time.Second), "err", err)
		}
		// An immediate refusal (no responders, JetStream unavailable) is a leader still being chosen:
		// wait a little rather than ask again at once.
		if w := wait - time.Since(try); w > 0 {
			t := time.NewTimer(w)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// Unanswered says whether err means the request got no answer from a server able to give one, so
// that sending it again may get one. JetStream turned off answers 503, as an election does, but does
// not pass: it is an answer.
func Unanswered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		(errors.As(err, &apiErr) && apiErr.Code == 503 && !JetStreamOff(err))
}

// JetStreamOff says whether err is a server's or an account's JetStream being off.
func JetStreamOff(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
}

// Stream looks the stream up with its current info (Stream.CachedInfo), through Retry.
func Stream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	return Retry(ctx, 0, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, name) })
}
