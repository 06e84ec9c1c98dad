package main

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/internal/freeport"
)

// readyService runs until ctx ends and is ready when the test says so.
type readyService struct{ ready chan struct{} }

func (s *readyService) Ready() <-chan struct{} { return s.ready }

func (s *readyService) Run(ctx context.Context) error { <-ctx.Done(); return nil }

// /readyz answers 503 until a service with a Ready channel closes it and its consumer is bound, then 200.
func TestServeReadyzWaitsForService(t *testing.T) {
	_, url := bustest.Server(t)
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)

	svc := &readyService{ready: make(chan struct{})}
	c := common{nats: url, id: "t", healthAddr: addr, replicas: 1, consumers: []string{bus.ConsumerStore}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.serve(ctx, "test", func(*bus.Conn) (interface{ Run(context.Context) error }, error) { return svc, nil })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	client := &http.Client{Timeout: 5 * time.Second}
	status := func() int {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bustest.Eventually(t, 30*time.Second, func() bool { return status() != 0 }, "health endpoint up")
	if got := status(); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before the service is ready: %d, want 503", got)
	}
	close(svc.ready)
	// Not ready yet: the store's consumer is not bound. Bind it here, as the store's Run would.
	if got := status(); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before the consumer is bound: %d, want 503", got)
	}
	conn := bustest.Conn(t, url, "consumer")
	consumed := make(chan error, 1)
	go func() {
		consumed <- bus.Consume(ctx, conn.JS, bus.ConsumerSpec{Stream: bus.StreamPods, Durable: bus.ConsumerStore,
			Filters: []string{bus.SubjPodCommands}}, func(context.Context, *bus.Msg) error { return nil })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-consumed; err != nil {
			t.Errorf("consume: %v", err)
		}
	})
	bustest.Eventually(t, 10*time.Second, func() bool { return status() == http.StatusOK }, "/readyz 200 once ready and bound")
}

func TestNthCIDR(t *testing.T) {
	tests := []struct {
		base string
		i    int
		want string
	}{
		{"10.42.1.0/24", 0, "10.42.1.0/24"},
		{"10.42.1.0/24", 254, "10.42.255.0/24"},
		{"10.42.1.0/24", 255, "10.43.0.0/24"},
		{"10.42.1.7/16", 1, "10.42.2.0/24"},
	}
	for _, tt := range tests {
		got, err := nthCIDR(tt.base, tt.i)
		if err != nil || got != tt.want {
			t.Errorf("nthCIDR(%q, %d) = %q, %v; want %q", tt.base, tt.i, got, err, tt.want)
		}
	}
	if _, err := nthCIDR("fd00::/64", 1); err == nil {
		t.Error("nthCIDR accepted an IPv6 range")
	}
}

// TestAutoCIDR: one simulated node per process keeps the address's own /24; n of them start n /24s
// apart, so two containers' ranges never overlap.
func TestAutoCIDR(t *testing.T) {
	tests := []struct {
		v    uint32 // last two bytes of the address
		n    int
		want string
	}{
		{0x0005, 1, "10.0.5.0/24"},
		{0x0105, 0, "10.1.5.0/24"},
		{0x0005, 100, "10.1.244.0/24"},
		{0x0006, 100, "10.2.88.0/24"},
		{0xffff, 2, "10.255.254.0/24"},
	}
	for _, tt := range tests {
		if got := autoCIDR(tt.v, tt.n); got != tt.want {
			t.Errorf("autoCIDR(%#x, %d) = %q, want %q", tt.v, tt.n, got, tt.want)
		}
	}
	// The last range of one container and the first of the next touch without overlapping.
	last, err := nthCIDR(autoCIDR(5, 100), 99)
	if err != nil || last != "10.2.87.0/24" {
		t.Errorf("the 100th range of address .5 = %q, %v; want 10.2.87.0/24, just before .6's first", last, err)
	}
}
