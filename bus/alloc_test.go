package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// TestWriteAllUnder proves a batch of writes under one node's filter is stored whole when the node is
// unchanged, and not at all when another write came in between; other nodes' writes do not count.
func TestWriteAllUnder(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := c.JS.KeyValue(ctx, bus.BucketAlloc)
	if err != nil {
		t.Fatal(err)
	}
	filter := bus.AllocNodeFilter("n1")
	batch := func(uids ...string) []bus.KVWrite {
		var ws []bus.KVWrite
		for _, u := range uids {
			ws = append(ws, bus.KVWrite{Key: bus.AllocPodKey("n1", u), Data: []byte(u)})
		}
		return ws
	}
	rev, err := bus.WriteAllUnder(ctx, c.JS, kv, batch("a", "b", "c"), filter, 0)
	if err != nil {
		t.Fatalf("first batch: %v", err)
	}
	for _, u := range []string{"a", "b", "c"} {
		if e, err := kv.Get(ctx, bus.AllocPodKey("n1", u)); err != nil || string(e.Value()) != u || e.Revision() > rev {
			t.Fatalf("key %s after the batch at %d: %v, %v", u, rev, e, err)
		}
	}
	// Another node's write does not move n1's revision.
	if _, err := bus.WriteUnder(ctx, c.JS, kv, bus.AllocPodKey("n2", "x"), []byte("x"), false, bus.AllocNodeFilter("n2"), 0); err != nil {
		t.Fatal(err)
	}
	ws := append(batch("d", "e"), bus.KVWrite{Key: bus.AllocPodKey("n1", "a"), Delete: true})
	rev2, err := bus.WriteAllUnder(ctx, c.JS, kv, ws, filter, rev)
	if err != nil {
		t.Fatalf("second batch at %d: %v", rev, err)
	}
	if _, err := kv.Get(ctx, bus.AllocPodKey("n1", "a")); !errors.Is(err, jetstream.ErrKeyDeleted) && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a after its deletion in a batch: %v", err)
	}
	// A stale revision stores nothing.
	_, err = bus.WriteAllUnder(ctx, c.JS, kv, batch("f", "g"), filter, rev)
	var ce *bus.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("batch on a stale revision: %v, want a conflict", err)
	}
	for _, u := range []string{"f", "g"} {
		if _, err := kv.Get(ctx, bus.AllocPodKey("n1", u)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("key %s of a refused batch: %v, want none", u, err)
		}
	}
	if _, err := bus.WriteAllUnder(ctx, c.JS, kv, batch("f", "g"), filter, rev2); err != nil {
		t.Fatalf("batch at the current revision %d: %v", rev2, err)
	}
}

// TestWriteAllUnderDisabled proves a stream without atomic publish refuses a batch whole, with
// ErrAtomicDisabled, so a caller can fall back to single writes.
func TestWriteAllUnderDisabled(t *testing.T) {
	_, c := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.JS.Stream(ctx, bus.KVStream(bus.BucketAlloc))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if !cfg.AllowAtomicPublish {
		t.Fatal("provisioned alloc bucket does not allow atomic publish")
	}
	cfg.AllowAtomicPublish = false
	if _, err := c.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	kv, err := c.JS.KeyValue(ctx, bus.BucketAlloc)
	if err != nil {
		t.Fatal(err)
	}
	ws := []bus.KVWrite{{Key: bus.AllocPodKey("n1", "a"), Data: []byte("a")}, {Key: bus.AllocPodKey("n1", "b"), Data: []byte("b")}}
	if _, err := bus.WriteAllUnder(ctx, c.JS, kv, ws, bus.AllocNodeFilter("n1"), 0); !errors.Is(err, bus.ErrAtomicDisabled) {
		t.Fatalf("batch on a stream without atomic publish: %v, want ErrAtomicDisabled", err)
	}
	if _, err := kv.Get(ctx, bus.AllocPodKey("n1", "a")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("staged key of a refused batch: %v, want none", err)
	}
	// Provisioning again turns it back on.
	if err := bus.Provision(ctx, c.JS, bus.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.WriteAllUnder(ctx, c.JS, kv, ws, bus.AllocNodeFilter("n1"), 0); err != nil {
		t.Fatalf("batch after provisioning again: %v", err)
	}
}
