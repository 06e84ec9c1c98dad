package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Difference is one object whose rebuilt state differs from the live store.
type Difference struct {
	Bucket string // pods or nodes
	Key    string // ns/name for pods, the node name for nodes
	Diff   string // "missing from the history", "only in the history", or a field diff (- history, + live)
}

func (d Difference) String() string { return fmt.Sprintf("%s %s: %s", d.Bucket, d.Key, d.Diff) }

// VerifyOptions shape Verify.
type VerifyOptions struct {
	Stream string // the history to rebuild from (default bus.StreamAudit; a copy in tests)
	// Settle is how long differences may take to disappear before they are reported (default 3s): the
	// live store keeps changing (heartbeats) and the log receives each change a moment later.
	Settle time.Duration
}

// VerifyResult says what was compared.
type VerifyResult struct {
	Pods, Nodes int // live objects compared
	Records     int // history records replayed
	Differences []Difference
}

// Verify rebuilds the pods and nodes buckets from the history alone (every put and delete record, in
// order) and compares each object field by field with the live buckets. It returns ErrDifferences
// (with the list in the result) when they differ after Settle.
func Verify(ctx context.Context, js jetstream.JetStream, o VerifyOptions) (VerifyResult, error) {
	if o.Settle <= 0 {
		o.Settle = 3 * time.Second
	}
	deadline := time.Now().Add(o.Settle)
	for {
		res, err := verifyOnce(ctx, js, o.Stream)
		if err != nil || len(res.Differences) == 0 || time.Now().After(deadline) {
			if err == nil && len(res.Differences) > 0 {
				err = fmt.Errorf("%w: %d objects differ", ErrDifferences, len(res.Differences))
			}
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func verifyOnce(ctx context.Context, js jetstream.JetStream, stream string) (VerifyResult, error) {
	var res VerifyResult
	b, err := bus.OpenBuckets(ctx, js)
	if err != nil {
		return res, err
	}
	livePods, err := readBucket(ctx, b.Pods)
	if err != nil {
		return res, err
	}
	liveNodes, err := readBucket(ctx, b.Nodes)
	if err != nil {
		return res, err
	}
	res.Pods, res.Nodes = len(livePods), len(liveNodes)

	hist := map[string]map[string][]byte{bus.BucketPods: {}, bus.BucketNodes: {}}
	err = Scan(ctx, js, ScanOptions{Stream: stream, Filters: []string{bus.SubjKV(bus.BucketPods) + ">", bus.SubjKV(bus.BucketNodes) + ">"}}, func(r *Record) error {
		res.Records++
		bucket, key, _ := r.Bucket()
		if r.Deleted() {
			delete(hist[bucket], key)
		} else {
			hist[bucket][key] = slices.Clone(r.Data)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Differences = append(compare(bus.BucketPods, hist[bus.BucketPods], livePods, func() proto.Message { return &pb.Pod{} }),
		compare(bus.BucketNodes, hist[bus.BucketNodes], liveNodes, func() proto.Message { return &pb.Node{} })...)
	return res, nil
}

// readBucket reads every live entry of a bucket: key -> value.
func readBucket(ctx context.Context, kv jetstream.KeyValue) (map[string][]byte, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string][]byte{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("read bucket " + kv.Bucket() + ": watcher closed")
			}
			if e == nil {
				return out, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				delete(out, e.Key()) // a delete read after the value it ends
				continue
			}
			out[e.Key()] = e.Value()
		}
	}
}

// compare decodes both sides and lists the keys whose objects differ, sorted.
func compare(bucket string, hist, live map[string][]byte, newMsg func() proto.Message) []Difference {
	var out []Difference
	name := func(key string) string {
		if ns, n, ok := bus.SplitPodKey(key); ok && bucket == bus.BucketPods {
			return ns + "/" + n
		}
		if n, ok := bus.Untoken(key); ok {
			return n
		}
		return key
	}
	for key, lv := range live {
		hv, ok := hist[key]
		if !ok {
			out = append(out, Difference{bucket, name(key), "missing from the history"})
			continue
		}
		hm, lm := newMsg(), newMsg()
		if err := proto.Unmarshal(hv, hm); err != nil {
			out = append(out, Difference{bucket, name(key), "history record does not decode: " + err.Error()})
			continue
		}
		if err := proto.Unmarshal(lv, lm); err != nil {
			out = append(out, Difference{bucket, name(key), "live entry does not decode: " + err.Error()})
			continue
		}
		if !proto.Equal(hm, lm) {
			out = append(out, Difference{bucket, name(key), cmp.Diff(hm, lm, protocmp.Transform())})
		}
	}
	for key := range hist {
		if _, ok := live[key]; !ok {
			out = append(out, Difference{bucket, name(key), "only in the history (deleted live)"})
		}
	}
	slices.SortFunc(out, func(a, b Difference) int {
		if a.Bucket != b.Bucket {
			return cmpString(a.Bucket, b.Bucket)
		}
		return cmpString(a.Key, b.Key)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
