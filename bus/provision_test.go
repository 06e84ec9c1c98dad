package bus_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// updates records the streams the server reports updated (its JetStream advisories).
type updates struct {
	mu    sync.Mutex
	names []string
}

func watchUpdates(t *testing.T, nc *nats.Conn) *updates {
	t.Helper()
	u := &updates{}
	sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.*", func(m *nats.Msg) {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.names = append(u.names, m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return u
}

// seen is what was reported once the server has answered everything sent before (a round trip of nc,
// on which the advisories come).
func (u *updates) seen(t *testing.T, nc *nats.Conn) []string {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.names
	u.names = nil
	return out
}

// A service starting against provisioned streams changes none of them; a stream whose configuration
// drifted is updated back, and only it.
func TestProvisionLeavesMatchingStreamsAlone(t *testing.T) {
	for _, o := range []bus.Options{{}, {Memory: true, Buckets: []bus.BucketSpec{{Name: "deployments", History: 4}}}} {
		t.Run(map[bool]string{false: "files", true: "memory"}[o.Memory], func(t *testing.T) {
			_, url := bustest.Server(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := bus.Connect(ctx, url, "provision")
			if err != nil {
				t.Fatal(err)
			}
			defer c.NC.Close()
			if err := bus.Provision(ctx, c.JS, o); err != nil {
				t.Fatal(err)
			}
			u := watchUpdates(t, c.NC)
			if err := bus.Provision(ctx, c.JS, o); err != nil {
				t.Fatal(err)
			}
			if got := u.seen(t, c.NC); len(got) != 0 {
				t.Fatalf("provisioning again updated %v, want nothing", got)
			}

			st, err := c.JS.Stream(ctx, bus.KVStream(bus.BucketAlloc))
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			if !cfg.AllowAtomicPublish || cfg.AllowDirect != true {
				t.Fatalf("alloc bucket on one server: atomic %v, direct %v; want both", cfg.AllowAtomicPublish, cfg.AllowDirect)
			}
			cfg.AllowAtomicPublish = false
			if _, err := c.JS.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			u.seen(t, c.NC)
			if err := bus.Provision(ctx, c.JS, o); err != nil {
				t.Fatal(err)
			}
			if got := u.seen(t, c.NC); len(got) != 1 || got[0] != bus.KVStream(bus.BucketAlloc) {
				t.Fatalf("provisioning a drifted alloc bucket updated %v, want [%s]", got, bus.KVStream(bus.BucketAlloc))
			}
			if st, err = c.JS.Stream(ctx, bus.KVStream(bus.BucketAlloc)); err != nil || !st.CachedInfo().Config.AllowAtomicPublish {
				t.Fatalf("alloc bucket after provisioning: %v, atomic publish off", err)
			}
		})
	}
}
