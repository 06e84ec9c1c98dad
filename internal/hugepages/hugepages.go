// Package hugepages backs the Go heap with transparent huge pages where the host only gives them to
// memory that asks (the "madvise" mode, Debian's default). The Go runtime no longer advises its heap,
// so a control plane holding a few GiB would otherwise take a page fault for every 4 KiB it first
// touches and miss the TLB on much of what it reads.
//
// The runtime maps its heap in 4 MiB steps as it grows, each a fresh mapping that has not asked for
// huge pages. Reserve grows the heap once by the size it is expected to reach, advises that one
// mapping, and gives the memory back: the heap's later growth reuses those addresses, and the kernel
// backs each 2 MiB of them with one huge page on its first touch.
package hugepages

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The host's modes, as Linux shows them in EnabledPath.
const (
	ModeAlways  = "always"
	ModeMadvise = "madvise"
	ModeNever   = "never"
)

// EnabledPath is where Linux shows its transparent huge pages mode, the current one in brackets.
const EnabledPath = "/sys/kernel/mm/transparent_hugepage/enabled"

const hugePage = 2 << 20

// Sentinels of Reserve: why the heap was left as it was.
var (
	ErrNotNeeded   = errors.New("the host gives huge pages to every mapping")
	ErrUnavailable = errors.New("transparent huge pages are off or unavailable")
	ErrOvercommit  = errors.New("strict overcommit: reserving address space would be charged in full")
	ErrTooSmall    = errors.New("size below one huge page")
)

// Host is this host's mode ("" when the kernel does not say).
func Host() string {
	b, _ := os.ReadFile(EnabledPath) // unreadable: ParseMode finds no mode
	return ParseMode(string(b))
}

// ParseMode reads the bracketed mode of a line such as "always [madvise] never".
func ParseMode(s string) string {
	i := strings.IndexByte(s, '[')
	j := strings.IndexByte(s, ']')
	if i < 0 || j <= i+1 {
		return ""
	}
	return s[i+1 : j]
}

// Host facts Reserve depends on, read from /proc and /sys; tests replace them.
type hostInfo struct {
	mode       string
	overcommit int   // vm.overcommit_memory: 2 is strict accounting
	memTotal   int64 // bytes; 0 when unknown
}

func readHost() hostInfo {
	h := hostInfo{mode: Host(), overcommit: -1}
	if b, err := os.ReadFile("/proc/sys/vm/overcommit_memory"); err == nil {
		h.overcommit, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				h.memTotal = kb << 10
				break
			}
		}
	}
	return h
}

// Size is what Reserve should reserve for a heap bounded by limit (the runtime's soft memory limit,
// math.MaxInt64 or less than one when there is none): the limit, at most half the machine's memory.
func Size(limit int64) int64 {
	return sizeFor(limit, readHost())
}

func sizeFor(limit int64, h hostInfo) int64 {
	if limit <= 0 || limit == 1<<63-1 {
		return 0
	}
	if h.memTotal > 0 && limit > h.memTotal/2 {
		limit = h.memTotal / 2
	}
	return limit &^ (hugePage - 1)
}

// Reserve grows the heap by n bytes in one mapping, advises it MADV_HUGEPAGE and returns the memory to
// the runtime and the kernel: nothing stays resident. Call it at start, before the heap grows. It
// returns the bytes advised, or a sentinel saying why it did nothing.
func Reserve(n int64) (int64, error) {
	return reserve(n, readHost())
}

func reserve(n int64, h hostInfo) (int64, error) {
	switch {
	case h.mode == ModeAlways:
		return 0, ErrNotNeeded
	case h.mode != ModeMadvise:
		return 0, ErrUnavailable
	case h.overcommit == 2:
		return 0, ErrOvercommit
	case n < hugePage:
		return 0, ErrTooSmall
	}
	// One allocation this large is one fresh mapping of the heap; the runtime hands it out without
	// touching it, so it costs address space, not memory.
	b := make([]byte, n)
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(n)
	lo = (lo + hugePage - 1) &^ (hugePage - 1)
	hi &^= hugePage - 1
	err := madvise(lo, hi, unix.MADV_HUGEPAGE)
	runtime.KeepAlive(b)
	// Collect it and release its pages now, rather than leave the runtime counting them against the
	// memory limit until its scavenger gets there.
	debug.FreeOSMemory()
	if err != nil {
		return 0, fmt.Errorf("madvise: %w", err)
	}
	return int64(hi - lo), nil
}

// madvise takes plain addresses: the range is the runtime's memory, not an object of ours.
func madvise(lo, hi uintptr, advice int) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, uintptr(advice)); e != 0 {
		return e
	}
	return nil
}
