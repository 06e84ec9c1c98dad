package bus_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// updates records the streams the server reports updated (its JetStream advisories).
type updates struct {
	js    jetstream.JetStream
	mu    sync.Mutex
	names []string
	marks int
}

// markStream is updated by seen so that advisories of what came before have time to arrive: each
// stream sends its own from a queue of its own, queued before the server answers the request.
const markStream = "MARK"

func watchUpdates(t *testing.T, c *bus.Conn) *updates {
	t.Helper()
	u := &updates{js: c.JS}
	ctx := context.Background()
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: markStream, Subjects: []string{"mark"}}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.NC.Subscribe("$JS.EVENT.ADVISORY.STREAM.UPDATED.*", func(m *nats.Msg) {
		u.mu.Lock()
		defer u.mu.Unlock()
		name := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		if name == markStream {
			u.marks++
			return
		}
		u.names = append(u.names, name)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := c.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return u
}

// await waits for name's update advisory and takes it out of what seen reports; other streams'
// advisories stay, since each stream sends its own and they may come in any order.
func (u *updates) await(t *testing.T, name string) {
	t.Helper()
	bustest.Eventually(t, 10*time.Second, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		if i := slices.Index(u.names, name); i >= 0 {
			u.names = slices.Delete(u.names, i, i+1)
			return true
		}
		return false
	}, "%s's update advisory", name)
}

// seen is what was reported updated since the last call, once the server has had the time of a mark
// stream's update to send the advisories of the requests made before it.
func (u *updates) seen(t *testing.T) []string {
	t.Helper()
	u.mu.Lock()
	want := u.marks + 1
	u.mu.Unlock()
	if _, err := u.js.UpdateStream(context.Background(), jetstream.StreamConfig{Name: markStream, Subjects: []string{"mark"},
		Description: strconv.Itoa(want)}); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, 10*time.Second, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.marks >= want
	}, "the mark stream's update advisory")
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
			u := watchUpdates(t, c)
			if err := bus.Provision(ctx, c.JS, o); err != nil {
				t.Fatal(err)
			}
			if got := u.seen(t); len(got) != 0 {
				t.Fatalf("provisioning again updated %v, want nothing", got)
			}

			alloc := bus.KVStream(bus.BucketAlloc)
			st, err := c.JS.Stream(ctx, alloc)
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			if !cfg.AllowAtomicPublish || !cfg.AllowDirect {
				t.Fatalf("alloc bucket on one server: atomic %v, direct %v; want both", cfg.AllowAtomicPublish, cfg.AllowDirect)
			}
			cfg.AllowAtomicPublish = false
			if _, err := c.JS.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			u.await(t, alloc)
			if err := bus.Provision(ctx, c.JS, o); err != nil {
				t.Fatal(err)
			}
			u.await(t, alloc)
			if got := u.seen(t); len(got) != 0 {
				t.Fatalf("provisioning a drifted alloc bucket also updated %v, want %s alone", got, alloc)
			}
			if st, err = c.JS.Stream(ctx, alloc); err != nil || !st.CachedInfo().Config.AllowAtomicPublish {
				t.Fatalf("alloc bucket after provisioning: %v, atomic publish off", err)
			}
		})
	}
}
