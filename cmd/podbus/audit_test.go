package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podbus/podbus/audit"
	"github.com/podbus/podbus/bus"
	"github.com/podbus/podbus/bus/bustest"
)

// `podbus auditseal` seals the log with a key it makes in --data-dir; `audit verify --chain` with that
// key passes, and with another sealer's key fails with ErrChainBroken; `audit replay --verify-chain`
// writes the records it checked.
func TestAuditSealAndVerifyChain(t *testing.T) {
	_, url := bustest.Server(t)
	c := bustest.Conn(t, url, t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 5 {
		if _, err := c.JS.Publish(ctx, bus.SubjPodStatus("n1"), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runAuditSeal(sctx, []string{"--nats", url, "--data-dir", dir, "--id", "s", "--block-interval", "50ms"})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	pub := filepath.Join(dir, audit.SealPubKeyFile)
	bustest.Eventually(t, 10*time.Second, func() bool {
		return runAudit(ctx, []string{"verify", "--chain", "--nats", url, "--pubkey", pub, "--settle", "100ms"}) == nil
	}, "audit verify --chain passes")

	other := t.TempDir()
	if _, err := audit.LoadOrCreateSealKey(other); err != nil {
		t.Fatal(err)
	}
	err := runAudit(ctx, []string{"verify", "--chain", "--nats", url, "--pubkey", filepath.Join(other, audit.SealPubKeyFile), "--settle", "100ms"})
	if !errors.Is(err, audit.ErrChainBroken) {
		t.Errorf("verify --chain with another key: %v, want ErrChainBroken", err)
	}

	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	err = runAudit(ctx, []string{"replay", "--verify-chain", "-o", "json", "--nats", url, "--pubkey", pub})
	os.Stdout = stdout
	out.Close()
	if err != nil {
		t.Fatalf("replay --verify-chain: %v", err)
	}
	data, _ := os.ReadFile(out.Name())
	if n := len(splitLines(data)); n != 5 {
		t.Errorf("replay --verify-chain wrote %d lines, want 5:\n%s", n, data)
	}
}

func splitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return out
}

// --timeout bounds an audit command, connecting included: one that cannot finish gives up with an
// error that says so, and one that follows the log stops following without one.
func TestAuditTimeout(t *testing.T) {
	_, url := bustest.Server(t)
	bustest.Conn(t, url, t.Name())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := "nats://" + ln.Addr().String()
	ln.Close()
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{name: "no server answers", args: []string{"replay", "--nats", nobody, "--timeout", "300ms"}, wantErr: true},
		{name: "following", args: []string{"replay", "--follow", "--nats", url, "--timeout", "300ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := runAudit(ctx, tt.args)
			if ctx.Err() != nil {
				t.Fatal("--timeout did not end the command")
			}
			if tt.wantErr != (err != nil) {
				t.Fatalf("runAudit(%v) = %v, want an error: %v", tt.args, err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "gave up after 300ms (--timeout)") {
				t.Errorf("error %q does not say it gave up", err)
			}
		})
	}
}
