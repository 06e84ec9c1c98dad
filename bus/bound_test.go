package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// A consumer counts as unbound while Consume cannot create it (its stream is missing), and as bound once
// it can, until Consume returns: what a service's /readyz waits for.
func TestUnboundUntilConsumerCreated(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := bus.Unbound()
	done := make(chan error, 1)
	go func() {
		done <- bus.Consume(ctx, c.JS, bus.ConsumerSpec{Stream: "LATE", Durable: "late"}, func(context.Context, *bus.Msg) error { return nil })
	}()
	bustest.Eventually(t, 5*time.Second, func() bool { return bus.Unbound() == base+1 }, "consumer of a missing stream counted unbound")
	if bus.Bound("late") {
		t.Error("Bound before the consumer exists")
	}
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool { return bus.Unbound() == base && bus.Bound("late") }, "consumer bound once its stream exists")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if bus.Bound("late") {
		t.Error("Bound after Consume returned")
	}
}
