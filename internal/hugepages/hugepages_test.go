package hugepages

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func TestParseMode(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"always [madvise] never\n", ModeMadvise},
		{"[always] madvise never", ModeAlways},
		{"always madvise [never]", ModeNever},
		{"", ""},
		{"always madvise never", ""},
		{"[]", ""},
	} {
		if got := ParseMode(tt.in); got != tt.want {
			t.Errorf("ParseMode(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// Reserve leaves the heap alone where it cannot help or could harm, and says why.
func TestReserveRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		host hostInfo
		n    int64
		want error
	}{
		{"always gives them anyway", hostInfo{mode: ModeAlways}, 64 << 20, ErrNotNeeded},
		{"never", hostInfo{mode: ModeNever}, 64 << 20, ErrUnavailable},
		{"no THP in the kernel", hostInfo{}, 64 << 20, ErrUnavailable},
		{"strict overcommit", hostInfo{mode: ModeMadvise, overcommit: 2}, 64 << 20, ErrOvercommit},
		{"nothing to reserve", hostInfo{mode: ModeMadvise}, 0, ErrTooSmall},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if n, err := reserve(tt.n, tt.host); !errors.Is(err, tt.want) || !errors.Is(err, ErrSkipped) || n != 0 {
				t.Errorf("reserve = %d, %v; want 0, %v (an ErrSkipped)", n, err, tt.want)
			}
		})
	}
}

// A process reserves once: a second reservation would zero the first one's pages. A refused one
// reserved nothing and does not count.
func TestReserveOncePerProcess(t *testing.T) {
	tests := []struct {
		name      string
		first     error
		want      []error
		wantCalls int
	}{
		{name: "reserved", want: []error{nil, ErrReserved, ErrReserved}, wantCalls: 1},
		{name: "refused first", first: ErrTooSmall, want: []error{ErrTooSmall, nil, ErrReserved}, wantCalls: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			r := reserver{do: func(n int64) (int64, error) {
				calls++
				if calls == 1 && tt.first != nil {
					return 0, tt.first
				}
				return n, nil
			}}
			for i, want := range tt.want {
				n, err := r.reserve(64 << 20)
				if !errors.Is(err, want) || (err == nil) != (n == 64<<20) {
					t.Errorf("call %d: reserve = %d, %v; want %v", i, n, err, want)
				}
			}
			if calls != tt.wantCalls {
				t.Errorf("the reservation ran %d times, want %d", calls, tt.wantCalls)
			}
		})
	}
}

// On a madvise host, the heap's growth after Reserve lands in advised memory, backed by huge pages
// from its first touch, and Reserve itself leaves nothing resident.
func TestReserveBacksHeapWithHugePages(t *testing.T) {
	h := readHost()
	if h.mode != ModeMadvise || h.overcommit == 2 {
		t.Skipf("needs transparent huge pages in madvise mode and heuristic overcommit (mode %q, overcommit %d)", h.mode, h.overcommit)
	}
	const size = 256 << 20
	before := rollup(t, "Rss")
	n, err := reserve(size, h)
	if err != nil || n < size-hugePage*2 {
		t.Fatalf("reserve = %d, %v; want about %d advised", n, err, size)
	}
	if grew := rollup(t, "Rss") - before; grew > 16<<10 {
		t.Errorf("the reservation left %d KiB resident", grew)
	}

	b := make([]byte, 64<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	// Its first bytes may fill the tail of the heap's mapping before the advised one.
	flags, huge := mappingOf(t, uintptr(unsafe.Pointer(&b[len(b)/2])))
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the heap's new memory is in a mapping without MADV_HUGEPAGE (VmFlags %q)", flags)
	}
	if huge == 0 {
		t.Errorf("64 MiB touched in advised memory, no huge page backs it")
	}
	if Backed(0) < huge<<10 {
		t.Errorf("Backed(0) = %d bytes, less than the %d KiB of the one mapping", Backed(0), huge)
	}
}

// rollup is a field of /proc/self/smaps_rollup, in KiB.
func rollup(t *testing.T, field string) int64 {
	t.Helper()
	v, ok := rollupKiB("/proc/self/smaps_rollup", field)
	if !ok {
		t.Fatalf("no %s in /proc/self/smaps_rollup", field)
	}
	return v
}

// mappingOf is the VmFlags and AnonHugePages (KiB) of the mapping holding addr.
func mappingOf(t *testing.T, addr uintptr) (flags string, hugeKiB int64) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rng, _, ok := strings.Cut(line, " "); ok && strings.Contains(rng, "-") && !strings.HasSuffix(rng, ":") {
			lo, hi, _ := strings.Cut(rng, "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				if in {
					break
				}
				in = uint64(addr) >= l && uint64(addr) < h
				continue
			}
		}
		if !in {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			hugeKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
		if rest, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			flags = strings.TrimSpace(rest)
		}
	}
	if flags == "" {
		t.Fatalf("no mapping holds %#x", addr)
	}
	return flags, hugeKiB
}
