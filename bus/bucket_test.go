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

// TestBucketReadsAndWrites proves the store helpers on an opened Bucket keep nats.go's KV semantics,
// on a stream that answers direct gets and on one that does not (replicated buckets): absent and
// deleted keys, compare-and-set, creating a key again after its deletion or purge.
func TestBucketReadsAndWrites(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(map[bool]string{true: "direct", false: "leader"}[direct], func(t *testing.T) {
			_, c := bustest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "KV_lean", Subjects: []string{"$KV.lean.>"},
				MaxMsgsPerSubject: 1, AllowRollup: true, DenyDelete: true, AllowDirect: direct, Discard: jetstream.DiscardNew}); err != nil {
				t.Fatal(err)
			}
			kv, err := bus.OpenBucket(ctx, c.JS, "lean")
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := kv.(*bus.Bucket); !ok {
				t.Fatalf("OpenBucket gave %T, want *bus.Bucket", kv)
			}
			const key = "default.p.a"
			if _, _, err := bus.GetEncoded(ctx, kv, key); !errors.Is(err, bus.ErrNotFound) {
				t.Fatalf("get of an absent key: %v, want ErrNotFound", err)
			}
			rev1, err := bus.CreateEncoded(ctx, kv, key, []byte("one"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bus.CreateEncoded(ctx, kv, key, []byte("again")); !errors.Is(err, bus.ErrExists) {
				t.Fatalf("create of an existing key: %v, want ErrExists", err)
			}
			if _, err := bus.UpdateEncoded(ctx, kv, key, []byte("stale"), rev1+100); !errors.Is(err, bus.ErrConflict) {
				t.Fatalf("update at a wrong revision: %v, want ErrConflict", err)
			}
			if _, err := bus.UpdateEncoded(ctx, kv, key, []byte("none"), 0); !errors.Is(err, bus.ErrConflict) {
				t.Fatalf("update at revision 0 of an existing key: %v, want ErrConflict", err)
			}
			rev2, err := bus.UpdateEncoded(ctx, kv, key, []byte("two"), rev1)
			if err != nil || rev2 <= rev1 {
				t.Fatalf("update at the current revision: %d, %v", rev2, err)
			}
			data, rev, err := bus.GetEncoded(ctx, kv, key)
			if err != nil || string(data) != "two" || rev != rev2 {
				t.Fatalf("get: %q at %d, %v; want \"two\" at %d", data, rev, err, rev2)
			}
			if e, err := kv.Get(ctx, key); err != nil || string(e.Value()) != "two" || e.Revision() != rev2 {
				t.Fatalf("nats.go reads %v, %v", e, err)
			}
			for _, remove := range []func() error{
				func() error { return kv.Delete(ctx, key) },
				func() error { return kv.Purge(ctx, key) },
			} {
				if err := remove(); err != nil {
					t.Fatal(err)
				}
				if _, _, err := bus.GetEncoded(ctx, kv, key); !errors.Is(err, bus.ErrNotFound) {
					t.Fatalf("get of a removed key: %v, want ErrNotFound", err)
				}
				if _, err := bus.CreateEncoded(ctx, kv, key, []byte("back")); err != nil {
					t.Fatalf("create after the key was removed: %v", err)
				}
			}
			if _, _, err := bus.GetEncoded(ctx, kv, "bad key"); !errors.Is(err, jetstream.ErrInvalidKey) {
				t.Fatalf("get of an invalid key: %v, want ErrInvalidKey", err)
			}
			if _, err := bus.UpdateEncoded(ctx, kv, "a..b", nil, 1); !errors.Is(err, jetstream.ErrInvalidKey) {
				t.Fatalf("update of an invalid key: %v, want ErrInvalidKey", err)
			}
		})
	}
}
