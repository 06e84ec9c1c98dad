package audit_test

import (
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/audit"
)

// A block reads back as written; any flipped byte fails its signature or its decoding.
func TestBlockRoundTrip(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(nil)
	b := &audit.Block{Stream: "AUDIT", StreamCreated: time.Unix(1, 2).UTC(), MaxAge: time.Hour, From: 7, Skipped: 2,
		Prev: audit.Digest{1}, SealedAt: time.Unix(3, 4).UTC(), Sealer: "s",
		Records: []audit.SealedRecord{{Origin: "PODS", OriginSeq: 9, Subject: "pod.scheduled", Digest: audit.Digest{2}},
			{Origin: "STATUS", OriginSeq: 1, Subject: "status.pod.n1", Digest: audit.Digest{3}},
			{Origin: "PODS", OriginSeq: 10, Subject: "pod.bound.n1", Digest: audit.Digest{4}}}}
	b.Sign(key)
	data := b.Encode()
	got, err := audit.DecodeBlock(data)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(b, got); d != "" {
		t.Errorf("decoded block (-written +read):\n%s", d)
	}
	if got.To() != 9 || got.Head() != (audit.Digest{4}) {
		t.Errorf("block covers ..%d with head %x", got.To(), got.Head())
	}
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if _, err := audit.DecodeBlock(bad); !errors.Is(err, audit.ErrBadSignature) && !errors.Is(err, audit.ErrBadBlock) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
}

// The content digest covers every header, whatever order they were set in, and the time.
func TestContentDigest(t *testing.T) {
	at := time.Unix(100, 5)
	m := func(h nats.Header, tm time.Time) audit.Digest {
		d, _ := audit.ContentDigest(&audit.RawMsg{Seq: 1, Time: tm, Subject: "pod.scheduled", Header: h, Data: []byte("x")}, nil)
		return d
	}
	base := m(nats.Header{"A": {"1"}, "B": {"2", "3"}, "Nats-Stream-Source": {"PODS 4 > > pod.scheduled x"}}, at)
	if base != m(nats.Header{"Nats-Stream-Source": {"PODS 4 > > pod.scheduled x"}, "B": {"2", "3"}, "A": {"1"}}, at) {
		t.Error("header order changes the digest")
	}
	for name, other := range map[string]audit.Digest{
		"a value":    m(nats.Header{"A": {"1"}, "B": {"3", "2"}, "Nats-Stream-Source": {"PODS 4 > > pod.scheduled x"}}, at),
		"the origin": m(nats.Header{"A": {"1"}, "B": {"2", "3"}, "Nats-Stream-Source": {"PODS 5 > > pod.scheduled x"}}, at),
		"the time":   m(nats.Header{"A": {"1"}, "B": {"2", "3"}, "Nats-Stream-Source": {"PODS 4 > > pod.scheduled x"}}, at.Add(1)),
		"a header":   m(nats.Header{"A": {"1"}, "B": {"2", "3"}, "C": {""}, "Nats-Stream-Source": {"PODS 4 > > pod.scheduled x"}}, at),
	} {
		if other == base {
			t.Errorf("changing %s leaves the digest unchanged", name)
		}
	}
}
