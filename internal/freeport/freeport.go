// Package freeport picks a loopback TCP port for a process that a test or harness starts and that
// binds the port itself.
//
// A port the kernel hands out for "127.0.0.1:0" is free only until the listener closes: the kernel
// may give it next to any outgoing connection's source port or to another listener on port 0, and the
// child then fails to bind. Pick takes ports below the kernel's ephemeral range, which the kernel
// never assigns by itself, so only another explicit pick can race for them.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the first port Pick considers: above the well-known and most registered service ports.
const lowest = 10000

// ErrNone reports that no port could be bound in the tries allowed.
var ErrNone = errors.New("freeport: no free port")

// Pick returns a port on 127.0.0.1 that nothing listened on a moment ago, from below the ephemeral
// range when the system has room there, else one the kernel chooses.
func Pick() (int, error) {
	hi := ephemeralStart()
	if hi-lowest < 1000 {
		return kernelPort()
	}
	return pickIn(lowest, hi, 64)
}

// pickIn tries random ports of [lo, hi) until one binds, at most tries times.
func pickIn(lo, hi, tries int) (int, error) {
	for range tries {
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("%w in [%d, %d)", ErrNone, lo, hi)
}

// ephemeralStart is the first port of the kernel's ephemeral range (32768 when it cannot be read,
// Linux's default).
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	return parseRangeStart(string(data))
}

func parseRangeStart(s string) int {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 0 {
		return 32768
	}
	return n
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
