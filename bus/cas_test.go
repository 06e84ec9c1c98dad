package bus

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A compare-and-set whose answer was lost (the connection dropped it, or none came in time) is settled
// by the key's last message: stored before the answer was lost, it succeeds at its revision; not stored,
// it is sent again; stored late, after its copy was sent again, the copy's refusal is taken for the
// first's success; another writer's change after it is told from the key's history: m stored before
// it succeeds, m never stored is refused (a conflict), and without the history the error stands.
func TestCASWithALostAnswer(t *testing.T) {
	for _, lost := range []error{nats.ErrDisconnected, nats.ErrTimeout} {
		t.Run(lost.Error(), func(t *testing.T) { testCASWithALostAnswer(t, lost) })
	}
}

func testCASWithALostAnswer(t *testing.T, lost error) {
	tests := []struct {
		name       string
		del        bool
		storeFirst bool  // the first send stores m, then its answer is lost
		storeLate  bool  // m is stored just before the second send
		meddle     bool  // another writer changes the key after the first send
		history    uint8 // the bucket's, 1 unless set
		wantErr    error // the lost answer's error (lost), or a refusal
		wantSends  int
	}{
		{name: "put stored, answer lost", storeFirst: true, wantSends: 1},
		{name: "put not stored", wantSends: 2},
		{name: "put stored late", storeLate: true, wantSends: 2},
		{name: "delete stored, answer lost", del: true, storeFirst: true, wantSends: 1},
		{name: "delete not stored", del: true, wantSends: 2},
		{name: "another writer, no history", meddle: true, wantErr: lost, wantSends: 1},
		{name: "another writer, not stored", meddle: true, history: 4, wantErr: errSettledRefusal, wantSends: 1},
		{name: "another writer after it", storeFirst: true, meddle: true, history: 4, wantSends: 1},
		{name: "delete, another writer after it", del: true, storeFirst: true, meddle: true, history: 4, wantSends: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHubTest(t, max(tt.history, 1))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b, err := newBucket(ctx, h.c.JS, h.kv)
			if err != nil {
				t.Fatal(err)
			}
			rev, err := h.kv.Put(ctx, "k", []byte("old"))
			if err != nil {
				t.Fatal(err)
			}
			m := &nats.Msg{Subject: b.prefix + "k", Data: []byte("new"), Header: nats.Header{hdrExpectedLastSubjSeq: {strconv.FormatUint(rev, 10)}}}
			if tt.del {
				m.Data = nil
				m.Header.Set(hdrKVOperation, kvOpDelete)
			}
			sends := 0
			send := func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
				sends++
				if sends == 1 {
					if tt.storeFirst {
						if _, err := b.send(ctx, m); err != nil {
							t.Fatal(err)
						}
					}
					if tt.meddle {
						if _, err := h.kv.Put(ctx, "k", []byte("theirs")); err != nil {
							t.Fatal(err)
						}
					}
					return nil, lost
				}
				if sends == 2 && tt.storeLate {
					if _, err := b.send(ctx, m); err != nil {
						t.Fatal(err)
					}
				}
				return b.send(ctx, m)
			}
			got, err := b.cas(ctx, m, rev, send)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("cas = %d, %v; want %v", got, err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("cas: %v", err)
			}
			if sends != tt.wantSends {
				t.Errorf("%d sends, want %d", sends, tt.wantSends)
			}
			if tt.wantErr != nil {
				if tt.wantErr == errSettledRefusal && !isWrongLastSeq(err) {
					t.Errorf("%v does not read as a refused compare-and-set", err)
				}
				return
			}
			last, err := getNext(ctx, b.nc, b.stream, m.Subject, rev+1)
			if err != nil {
				t.Fatal(err)
			}
			if got != last.seq || !writes(m, last) {
				t.Errorf("cas = %d; the key's message after %d is %d (deleted %v, %q)", got, rev, last.seq, last.deleted, last.data)
			}
			if last.seq != rev+1 {
				t.Errorf("the key's message after %d is at %d, want %d", rev, last.seq, rev+1)
			}
		})
	}
}
