package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A bucket watch's fence is the last entry under its keys, deletes included, on a file stream with
// history and on a memory stream; revision 0 on an empty bucket or pattern.
func TestBucketFence(t *testing.T) {
	for _, storage := range []jetstream.StorageType{jetstream.FileStorage, jetstream.MemoryStorage} {
		t.Run(storage.String(), func(t *testing.T) {
			s, err := RunServer(ServerConfig{Port: -1, StoreDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Shutdown)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := Connect(ctx, s.ClientURL(), t.Name())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.NC.Close)
			if _, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fence", History: 4, Storage: storage}); err != nil {
				t.Fatal(err)
			}
			kv, err := OpenBucket(ctx, c.JS, "fence")
			if err != nil {
				t.Fatal(err)
			}
			b := bucketOf(kv)
			if f, err := b.fence(">")(ctx); err != nil || f.seq != 0 {
				t.Fatalf("empty bucket: %+v, %v; want revision 0", f, err)
			}
			var revs []uint64
			for _, k := range []string{"a.p.x", "b.p.y", "a.p.z", "b.p.y"} {
				rev, err := kv.Put(ctx, k, []byte("v"))
				if err != nil {
					t.Fatal(err)
				}
				revs = append(revs, rev)
			}
			if err := kv.Delete(ctx, "a.p.x"); err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				keys    []string
				want    uint64
				deleted bool
			}{
				{[]string{">"}, revs[3] + 1, true},
				{[]string{"a.>"}, revs[3] + 1, true},
				{[]string{"b.>"}, revs[3], false},
				{[]string{"b.p.y"}, revs[3], false},
				{[]string{"a.p.z"}, revs[2], false},
				{[]string{"a.p.z", "b.>"}, revs[3], false},
				{[]string{"c.>"}, 0, false},
			}
			for _, tt := range tests {
				if f, err := b.fence(tt.keys...)(ctx); err != nil || f.seq != tt.want || f.deleted != tt.deleted {
					t.Errorf("fence of %q = %d (deleted %t), %v; want %d (deleted %t)", tt.keys, f.seq, f.deleted, err, tt.want, tt.deleted)
				}
			}
		})
	}
}
