package bus

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestParsePubAck proves the hand-read acknowledgement agrees with nats.go's reading of every form
// nats-server answers a publish with, and that what it does not expect still reads as nats.go reads it.
func TestParsePubAck(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    *jetstream.PubAck
		errCode jetstream.ErrorCode // an API error with this code
		invalid bool                // jetstream.ErrInvalidJSAck
	}{
		{name: "stored", data: `{"stream":"KV_pods","seq":42}`, want: &jetstream.PubAck{Stream: "KV_pods", Sequence: 42}},
		{name: "duplicate", data: `{"stream":"PODS","seq":7,"duplicate":true}`, want: &jetstream.PubAck{Stream: "PODS", Sequence: 7, Duplicate: true}},
		{name: "domain", data: `{"stream":"PODS","seq":7,"domain":"hub"}`, want: &jetstream.PubAck{Stream: "PODS", Sequence: 7, Domain: "hub"}},
		{name: "batch", data: `{"stream":"KV_alloc","seq":9,"batch":"b1","count":3}`, want: &jetstream.PubAck{Stream: "KV_alloc", Sequence: 9}},
		{name: "spaced", data: `{ "stream": "PODS", "seq": 3 }`, want: &jetstream.PubAck{Stream: "PODS", Sequence: 3}},
		{name: "escaped stream", data: `{"stream":"P\u004fDS","seq":3}`, want: &jetstream.PubAck{Stream: "PODS", Sequence: 3}},
		{name: "largest sequence", data: `{"stream":"S","seq":18446744073709551615}`, want: &jetstream.PubAck{Stream: "S", Sequence: 1<<64 - 1}},
		{name: "wrong last sequence", data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"KV_pods","seq":0}`,
			errCode: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "error only", data: `{"error":{"code":503,"err_code":10008,"description":"no leader"}}`, errCode: 10008},
		{name: "no stream", data: `{"seq":3}`, invalid: true},
		{name: "empty stream", data: `{"stream":"","seq":3}`, invalid: true},
		{name: "not json", data: `+OK`, invalid: true},
		{name: "sequence too large", data: `{"stream":"S","seq":18446744073709551616}`, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePubAck([]byte(tt.data))
			switch {
			case tt.invalid:
				if !errors.Is(err, jetstream.ErrInvalidJSAck) {
					t.Fatalf("got %+v, %v; want ErrInvalidJSAck", got, err)
				}
			case tt.errCode != 0:
				var apiErr *jetstream.APIError
				if !errors.As(err, &apiErr) || apiErr.ErrorCode != tt.errCode {
					t.Fatalf("got %+v, %v; want API error %d", got, err, tt.errCode)
				}
			case err != nil || *got != *tt.want:
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// FuzzParsePlainAck: whatever the hand reader accepts, encoding/json reads the same.
func FuzzParsePlainAck(f *testing.F) {
	for _, s := range []string{`{"stream":"KV_pods","seq":42}`, `{"stream":"PODS","seq":7,"duplicate":true}`,
		`{"stream":"S","seq":0}`, `{"stream":"S","seq":01}`, `{"stream":"a\"b","seq":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := parsePlainAck(data)
		if !ok {
			return
		}
		var want jetstream.PubAck
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%q read as %+v, but encoding/json refuses it: %v", data, got, err)
		}
		if *got != want {
			t.Fatalf("%q read as %+v, encoding/json reads %+v", data, got, want)
		}
	})
}

// TestPlainAckAllocations: reading a stored message's acknowledgement allocates only the result.
func TestPlainAckAllocations(t *testing.T) {
	data := []byte(`{"stream":"KV_pods","seq":123456}`)
	parsePlainAck(data)
	if n := testing.AllocsPerRun(100, func() { parsePlainAck(data) }); n > 1 {
		t.Fatalf("%v allocations per acknowledgement, want at most 1", n)
	}
}

func TestKeyValid(t *testing.T) {
	for key, want := range map[string]bool{
		"default.p.uid-1": true, "a/b_c=d-e": true, "x": true,
		"": false, ".a": false, "a.": false, "a..b": false, "a b": false, "a*": false, "a>": false, "ü": false,
	} {
		if got := keyValid(key); got != want {
			t.Errorf("keyValid(%q) = %v, want %v", key, got, want)
		}
	}
}

type namedKV struct {
	jetstream.KeyValue
	name string
}

func (k namedKV) Bucket() string { return k.name }

// TestBucketOf: a bucket the watch hub wraps still takes the lean requests; other handles do not.
func TestBucketOf(t *testing.T) {
	b := &Bucket{KeyValue: namedKV{name: BucketPods}}
	h := NewWatchHub(t.Context(), nil, nil, BucketPods)
	tests := []struct {
		name string
		kv   jetstream.KeyValue
		want *Bucket
	}{
		{"bucket", b, b},
		{"shared by the hub", h.Wrap(b), b},
		{"other", namedKV{name: BucketPods}, nil},
		{"other shared", h.Wrap(namedKV{name: BucketPods}), nil},
	}
	for _, tt := range tests {
		if got := bucketOf(tt.kv); got != tt.want {
			t.Errorf("%s: bucketOf = %p, want %p", tt.name, got, tt.want)
		}
	}
}
