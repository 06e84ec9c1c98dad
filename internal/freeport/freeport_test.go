package freeport

import (
	"errors"
	"net"
	"strconv"
	"testing"
)

func TestParseRangeStart(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"32768\t60999\n", 32768},
		{"40000 50000", 40000},
		{"", 32768},
		{"x 1", 32768},
		{"0 0", 32768},
	} {
		if got := parseRangeStart(tc.in); got != tc.want {
			t.Errorf("parseRangeStart(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestPickIsBindableAndBelowTheEphemeralRange(t *testing.T) {
	hi := ephemeralStart()
	seen := map[int]bool{}
	for range 20 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if hi-lowest >= 1000 && (p < lowest || p >= hi) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, hi)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("picked port %d cannot be bound: %v", p, err)
		}
		l.Close()
		seen[p] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 picks gave %d distinct ports", len(seen))
	}
}

// A port someone listens on is never picked, and a range with none free is an error.
func TestPickInSkipsBoundPorts(t *testing.T) {
	const lo, hi = lowest + 5000, lowest + 5010
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	free := -1
	for p := lo; p < hi; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // someone else's: just as bound
		}
		if free < 0 {
			free = p
			l.Close()
			continue
		}
		held = append(held, l)
	}
	if free < 0 {
		t.Skipf("every port of [%d, %d) is in use on this machine", lo, hi)
	}
	for range 5 {
		p, err := pickIn(lo, hi, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if p != free {
			t.Fatalf("picked %d; the only free port of [%d, %d) is %d", p, lo, hi, free)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(free))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := pickIn(lo, hi, 100); !errors.Is(err, ErrNone) {
		t.Fatalf("every port held: got %v, want ErrNone", err)
	}
}
