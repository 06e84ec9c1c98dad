package auditseal_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
	"github.com/podbus/podbus/services/auditseal"
)

func publish(t *testing.T, c *bus.Conn, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		if _, err := c.JS.Publish(ctx, bus.SubjPodStatus("n1"), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
}

func auditLast(t *testing.T, c *bus.Conn, want uint64) uint64 {
	t.Helper()
	var last uint64
	bustest.Eventually(t, 10*time.Second, func() bool {
		s, err := c.JS.Stream(context.Background(), bus.StreamAudit)
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		if err == nil {
			last = info.State.LastSeq
		}
		return last >= want
	}, "AUDIT has %d records", want)
	return last
}

// start runs a sealer until the test ends or stop is called.
func start(t *testing.T, c *bus.Conn, cfg auditseal.Config) (s *auditseal.Sealer, stop func()) {
	t.Helper()
	if cfg.BlockRecords == 0 {
		cfg.BlockRecords = 10
	}
	cfg.BlockInterval = 50 * time.Millisecond
	s, err := auditseal.New(cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(stop)
	return s, stop
}

// blocks reads every seal block in order.
func blocks(t *testing.T, c *bus.Conn) []*audit.Block {
	t.Helper()
	var out []*audit.Block
	for _, m := range bustest.Messages(t, c, bus.StreamAuditSeal, ">") {
		b, err := audit.DecodeBlock(m.Data)
		if err != nil {
			t.Fatalf("seal %d: %v", m.Sequence, err)
		}
		out = append(out, b)
	}
	return out
}

func sealedUpTo(t *testing.T, c *bus.Conn, last uint64) []*audit.Block {
	t.Helper()
	var bs []*audit.Block
	bustest.Eventually(t, 10*time.Second, func() bool {
		bs = blocks(t, c)
		return len(bs) > 0 && bs[len(bs)-1].To() >= last
	}, "AUDIT sealed up to %d", last)
	return bs
}

// contiguous checks the blocks cover 1..last once each, each chained onto the one before.
func contiguous(t *testing.T, bs []*audit.Block, last uint64) {
	t.Helper()
	next, prev := uint64(1), audit.Digest{}
	for i, b := range bs {
		if b.From != next || b.Prev != prev || b.Skipped != 0 {
			t.Fatalf("block %d covers %d..%d after %d (linked: %v, skipped %d)", i, b.From, b.To(), next-1, b.Prev == prev, b.Skipped)
		}
		next, prev = b.To()+1, b.Head()
	}
	if next != last+1 {
		t.Fatalf("blocks end at %d, AUDIT at %d", next-1, last)
	}
}

// A sealer stopped and started again goes on from its last block: no record sealed twice, none left
// out; and the whole verifies.
func TestRestartResumesTheChain(t *testing.T) {
	_, c := bustest.Start(t)
	dir := t.TempDir()
	publish(t, c, 25)
	last := auditLast(t, c, 25)
	s, stop := start(t, c, auditseal.Config{ID: "a", DataDir: dir})
	sealedUpTo(t, c, last)
	stop()
	publish(t, c, 37)
	last = auditLast(t, c, last+37)
	s2, _ := start(t, c, auditseal.Config{ID: "b", DataDir: dir})
	if !s2.PublicKey().Equal(s.PublicKey()) {
		t.Fatal("the restarted sealer made a new key")
	}
	contiguous(t, sealedUpTo(t, c, last), last)

	keys, err := audit.ReadPublicKeys(filepath.Join(dir, audit.SealPubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	res, err := audit.VerifyChain(context.Background(), c.JS, audit.ChainOptions{PublicKeys: keys, Settle: 200 * time.Millisecond})
	if err != nil || res.Sealed != int(last) {
		t.Fatalf("verify: %+v, %v", res, err)
	}
	fi, err := os.Stat(filepath.Join(dir, audit.SealKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v; want mode 0600", fi.Mode(), err)
	}
}

// Two sealers at once never interleave their blocks: each publish expects the last block's sequence,
// and the loser resumes from the winner's block.
func TestTwoSealersKeepOneChain(t *testing.T) {
	_, c := bustest.Start(t)
	_, key, _ := ed25519.GenerateKey(nil)
	start(t, c, auditseal.Config{ID: "a", Key: key, BlockRecords: 3})
	start(t, c, auditseal.Config{ID: "b", Key: key, BlockRecords: 3})
	var last uint64
	for range 5 {
		publish(t, c, 20)
		last = auditLast(t, c, last+20)
	}
	contiguous(t, sealedUpTo(t, c, last), last)
}

func TestNewNeedsAKey(t *testing.T) {
	_, c := bustest.Start(t)
	if _, err := auditseal.New(auditseal.Config{ID: "a"}, c); !errors.Is(err, auditseal.ErrConfig) {
		t.Fatalf("New without a key or data dir: %v, want ErrConfig", err)
	}
}

// A block short of BlockRecords is sealed BlockInterval after its first record, and the sealer reads
// the log through one consumer for its whole run, however many intervals pass.
func TestIntervalSealsOneConsumer(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := context.Background()
	consumers := func() []string {
		t.Helper()
		st, err := c.JS.Stream(ctx, bus.StreamAudit)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		l := st.ConsumerNames(ctx)
		for n := range l.Name() {
			names = append(names, n)
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	start(t, c, auditseal.Config{ID: "a", DataDir: t.TempDir(), BlockRecords: 100})
	var last uint64
	var first []string
	blocks := 0
	for i := range 3 {
		publish(t, c, 3)
		last = auditLast(t, c, last+3)
		// Three records usually share a block, but a record that reaches the sealer an interval
		// after the round's first one starts a block of its own.
		bs := sealedUpTo(t, c, last)
		if n := len(bs); n <= blocks || n > blocks+3 {
			t.Fatalf("%d blocks after round %d, had %d: want one to three more", n, i+1, blocks)
		}
		blocks = len(bs)
		if i == 0 {
			first = consumers()
			continue
		}
		// Each partial block waited out an interval, over which a consumer per fetch would be replaced.
		if got := consumers(); len(got) != 1 || len(first) != 1 || got[0] != first[0] {
			t.Fatalf("consumers of %s: %v, at the first block %v", bus.StreamAudit, got, first)
		}
	}
	contiguous(t, sealedUpTo(t, c, last), last)
}

// A sealer whose log went away is stuck in the client's re-creation of its consumer, which retries
// with back-off and does not watch the context; it still stops when asked.
func TestStopsWhileTheConsumerIsRecreated(t *testing.T) {
	_, c := bustest.Start(t)
	ctx := context.Background()
	s, err := auditseal.New(auditseal.Config{ID: "a", DataDir: t.TempDir(), BlockRecords: 10, BlockInterval: 50 * time.Millisecond}, c)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	publish(t, c, 3)
	last := auditLast(t, c, 3)
	sealedUpTo(t, c, last)
	// The stream and with it the sealer's consumer go: every re-creation fails until the stop. The
	// test waits for the first attempt, which the client makes with a request of its own.
	recreate, err := c.NC.SubscribeSync("$JS.API.CONSUMER.CREATE." + bus.StreamAudit + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.JS.DeleteStream(ctx, bus.StreamAudit); err != nil {
		t.Fatal(err)
	}
	if _, err := recreate.NextMsg(30 * time.Second); err != nil {
		t.Fatalf("no re-creation of the sealer's consumer: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after its context ended")
	}
}
