package chaos

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves connections that send back each line they read.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

// roundTrip sends a line and reads it back within d; an error when nothing comes back.
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	_, err := r.ReadString('\n')
	return err
}

func TestRouteNet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rn, err := newRouteNet(ctx, []string{echo(t), echo(t), echo(t)})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(i, j int) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", rn.proxies[i][j])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	const long = time.Minute // the answer is expected: only a broken proxy waits this long

	c01, r01 := dial(0, 1)
	c12, r12 := dial(1, 2)
	if err := roundTrip(c01, r01, long); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	// Member 0 isolated, reset: its connections are closed, new ones too; 1 and 2 still talk.
	rn.isolate(0, linkReset)
	if err := roundTrip(c01, r01, long); err == nil {
		t.Fatal("a reset link still carried bytes")
	}
	c, r := dial(2, 0)
	if err := roundTrip(c, r, long); err == nil {
		t.Fatal("a new connection over a reset link carried bytes")
	}
	if err := roundTrip(c12, r12, long); err != nil {
		t.Fatalf("a link not cut: %v", err)
	}
	rn.heal()
	c, r = dial(0, 1)
	if err := roundTrip(c, r, long); err != nil {
		t.Fatalf("after healing: %v", err)
	}

	// One link a blackhole: bytes are held, not lost, and arrive once it heals.
	rn.cut(1, 2, linkBlackhole)
	if err := roundTrip(c12, r12, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("through a blackhole: %v, want nothing", err)
	}
	if err := roundTrip(c, r, long); err != nil {
		t.Fatalf("the link 0-1 was not cut: %v", err)
	}
	rn.heal()
	_ = c12.SetReadDeadline(time.Now().Add(long))
	if _, err := r12.ReadString('\n'); err != nil {
		t.Fatalf("the held line, after the blackhole healed: %v", err)
	}
}
