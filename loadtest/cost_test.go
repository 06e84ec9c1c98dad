package loadtest

import (
	"context"
	"expvar"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// /proc/<pid>/stat's faults are fields 10 and 12, its times 14 and 15, counted after the command,
// which may hold spaces and parentheses.
func TestParseStat(t *testing.T) {
	for _, tt := range []struct {
		name, stat string
		want       procTimes
		ok         bool
	}{
		{"plain", "4242 (podbus) S 1 4242 4242 0 -1 4194560 100 0 7 0 250 130 0 0 20 0 9 0 1 1 1",
			procTimes{cpu: 3800 * time.Millisecond, sys: 1300 * time.Millisecond, faults: 107}, true},
		{"command with spaces and parens", "7 (a b) (c)) R 1 7 7 0 -1 0 5 0 0 0 1 2 0 0 20 0 1 0 1 1 1",
			procTimes{cpu: 30 * time.Millisecond, sys: 20 * time.Millisecond, faults: 5}, true},
		{"truncated", "7 (podbus) S 1 7 7", procTimes{}, false},
		{"no command", "garbage", procTimes{}, false},
		{"not a number", "7 (p) S 1 7 7 0 -1 0 0 0 0 0 x 2 0", procTimes{}, false},
		{"faults not a number", "7 (p) S 1 7 7 0 -1 0 y 0 0 0 1 2 0", procTimes{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseStat(tt.stat)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseStat = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestCostOf(t *testing.T) {
	a := spent{cpu: time.Second, totalAlloc: 1000, mallocs: 10, numGC: 3, ok: true}
	b := spent{cpu: 3 * time.Second, totalAlloc: 401000, mallocs: 4010, numGC: 7, ok: true}
	got := costOf(a, b, 200)
	want := Cost{CPUPerPodMS: 10, BytesPerPod: 2000, AllocsPerPod: 20, GCCycles: 4}
	if got == nil || *got != want {
		t.Fatalf("costOf = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "10.00 ms CPU, 2 KB and 20 allocations per pod; 4 GC cycles" {
		t.Errorf("String() = %q", s)
	}
	for name, c := range map[string]*Cost{
		"first reading failed":  costOf(spent{}, b, 200),
		"second reading failed": costOf(a, spent{}, 200),
		"no pod":                costOf(a, b, 0),
	} {
		if c != nil {
			t.Errorf("%s: costOf = %+v, want nil", name, c)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// A child's counters come from /proc and from the memstats its pprof address serves; this process
// stands in for the child.
func TestChildSpent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/vars" {
			http.NotFound(w, r)
			return
		}
		expvar.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	got := childSpent(ctx, os.Getpid(), addr)
	if !got.ok || got.totalAlloc == 0 || got.mallocs == 0 {
		t.Fatalf("childSpent = %+v, want this process's counters", got)
	}
	self := selfSpent()
	if got.totalAlloc > self.totalAlloc || got.mallocs > self.mallocs {
		t.Errorf("childSpent read %d bytes, %d allocations; later, the runtime says %d, %d",
			got.totalAlloc, got.mallocs, self.totalAlloc, self.mallocs)
	}
	if got := childSpent(ctx, os.Getpid(), "127.0.0.1:1"); got.ok {
		t.Errorf("childSpent with no server = %+v, want not ok", got)
	}
}
