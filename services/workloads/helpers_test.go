package workloads

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/internal/workload"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// webKey is the one object of each apps kind these tests store.
var webKey = bus.ObjectKey("default", "web")

// putWeb writes "default/web" to bucket as an API write would: change gets the stored object (nil when
// there is none) and returns what to store with its converted pod template. A lost compare-and-set is
// retried on the newer object.
func putWeb[T any](t *testing.T, c *bus.Conn, bucket string, change func(cur *T) (*T, *pb.Pod)) {
	t.Helper()
	ctx := context.Background()
	kv, err := c.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var cur *T
		var rev uint64
		e, err := kv.Get(ctx, webKey)
		switch {
		case err == nil:
			rev = e.Revision()
			cur = new(T)
			if _, err := workload.Decode(e.Value(), cur); err != nil {
				t.Fatal(err)
			}
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			t.Fatal(err)
		}
		obj, template := change(cur)
		data, err := workload.Encode(obj, template)
		if err != nil {
			t.Fatal(err)
		}
		if rev == 0 {
			_, err = bus.CreateEncoded(ctx, kv, webKey, data)
		} else {
			_, err = bus.UpdateEncoded(ctx, kv, webKey, data, rev)
		}
		if err == nil {
			return
		}
	}
}

// getWeb reads "default/web" from bucket.
func getWeb[T any](t *testing.T, c *bus.Conn, bucket string) *T {
	t.Helper()
	kv, err := c.JS.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), webKey)
	if err != nil {
		t.Fatal(err)
	}
	obj := new(T)
	if _, err := workload.Decode(e.Value(), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}
