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
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
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

// ErrSkipped is what every refusal of Reserve wraps: the host makes the reservation needless or unsafe.
var ErrSkipped = errors.New("heap left to the host's huge pages mode")

// Sentinels of Reserve: why the heap was left as it was.
var (
	ErrNotNeeded   = fmt.Errorf("%w: the host gives huge pages to every mapping", ErrSkipped)
	ErrUnavailable = fmt.Errorf("%w: transparent huge pages are off or unavailable", ErrSkipped)
	ErrOvercommit  = fmt.Errorf("%w: strict overcommit: reserving address space would be charged in full", ErrSkipped)
	ErrTooSmall    = fmt.Errorf("%w: size below one huge page", ErrSkipped)
	ErrReserved    = fmt.Errorf("%w: this process has reserved its heap already", ErrSkipped)
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
	overcommit int // vm.overcommit_memory: 2 is strict accounting
}

func readHost() hostInfo {
	h := hostInfo{mode: Host(), overcommit: -1}
	if b, err := os.ReadFile("/proc/sys/vm/overcommit_memory"); err == nil {
		h.overcommit, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return h
}

// Backed is how much of process pid's memory huge pages back, in bytes (0 when unknown); pid 0 is
// this process.
func Backed(pid int) int64 {
	path := "/proc/self/smaps_rollup"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/smaps_rollup", pid)
	}
	kib, _ := rollupKiB(path, "AnonHugePages")
	return kib << 10
}

// rollupKiB reads one field of an smaps_rollup file, in KiB.
func rollupKiB(path, field string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// Reserve grows the heap by n bytes in one mapping, advises it MADV_HUGEPAGE and returns the memory to
// the runtime and the kernel: nothing stays resident. Call it at start, before the heap grows, with n
// below the machine's memory (one mapping larger than that fails under heuristic overcommit, and the
// runtime throws). It returns the bytes advised, or an ErrSkipped saying why it did nothing.
//
// A process reserves once; later calls return ErrReserved. A second allocation of that size would be
// served from the first one's freed pages, which the runtime must zero: it would touch every page of
// the reservation, each now a huge page the kernel may have to compact memory for.
func Reserve(n int64) (int64, error) {
	return process.reserve(n)
}

var process = reserver{do: func(n int64) (int64, error) { return reserve(n, readHost()) }}

// reserver lets the first successful reservation of a process through and refuses the rest.
type reserver struct {
	do   func(int64) (int64, error)
	mu   sync.Mutex
	done bool
}

func (r *reserver) reserve(n int64) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return 0, ErrReserved
	}
	got, err := r.do(n)
	// A refusal reserved nothing, so it does not count: a later call may find a larger size.
	r.done = err == nil
	return got, err
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
