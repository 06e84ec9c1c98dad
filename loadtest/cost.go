package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podbus/podbus/internal/metrics"
)

// spent is what a process had used at one moment: CPU time and the Go runtime's allocation counters.
type spent struct {
	cpu        time.Duration
	totalAlloc uint64 // bytes allocated since the process started
	mallocs    uint64
	numGC      uint32
	ok         bool
}

// Cost is what a process spent over a run, per Ready pod. On a machine whose speed varies from one
// minute to the next, CPU time and allocation per pod compare two builds where pods/s cannot.
type Cost struct {
	CPUPerPodMS  float64 `json:"cpu_ms_per_pod"`
	BytesPerPod  float64 `json:"alloc_bytes_per_pod"`
	AllocsPerPod float64 `json:"allocs_per_pod"`
	GCCycles     uint32  `json:"gc_cycles"`
}

// costOf is what was spent from a to b for pods Ready pods; nil when either reading failed.
func costOf(a, b spent, pods int) *Cost {
	if !a.ok || !b.ok || pods <= 0 {
		return nil
	}
	n := float64(pods)
	return &Cost{
		CPUPerPodMS:  float64(b.cpu-a.cpu) / float64(time.Millisecond) / n,
		BytesPerPod:  float64(b.totalAlloc-a.totalAlloc) / n,
		AllocsPerPod: float64(b.mallocs-a.mallocs) / n,
		GCCycles:     b.numGC - a.numGC,
	}
}

// String reads as "2.61 ms CPU, 183 KB and 1,950 allocations per pod; 24 GC cycles".
func (c *Cost) String() string {
	return fmt.Sprintf("%.2f ms CPU, %.0f KB and %s allocations per pod; %d GC cycles",
		c.CPUPerPodMS, c.BytesPerPod/1000, thousands(int64(c.AllocsPerPod+0.5)), c.GCCycles)
}

// thousands writes n with commas.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// selfSpent reads this process's counters.
func selfSpent() spent {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return spent{}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return spent{
		cpu:        time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		totalAlloc: ms.TotalAlloc, mallocs: ms.Mallocs, numGC: ms.NumGC, ok: true,
	}
}

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100

// childSpent reads another podbus process's counters: its CPU time from /proc and its memstats from
// the /debug/vars of its PODBUS_PPROF address.
func childSpent(ctx context.Context, pid int, pprofAddr string) spent {
	pt, ok := procStat(pid)
	if !ok {
		return spent{}
	}
	vars, ok := readVars(ctx, pprofAddr)
	if !ok {
		return spent{}
	}
	m := vars.Memstats
	return spent{cpu: pt.cpu, totalAlloc: m.TotalAlloc, mallocs: m.Mallocs, numGC: m.NumGC, ok: true}
}

// debugVars is what the load test reads of a podbus process's /debug/vars.
type debugVars struct {
	Memstats struct {
		TotalAlloc, Mallocs uint64
		NumGC               uint32
	} `json:"memstats"`
	CPUClasses metrics.CPUClasses `json:"cpu_classes"`
}

// readVars reads /debug/vars from a process's PODBUS_PPROF address; false when it cannot.
func readVars(ctx context.Context, pprofAddr string) (debugVars, bool) {
	var vars debugVars
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pprofAddr+"/debug/vars", nil)
	if err != nil {
		return vars, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return vars, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return vars, false
	}
	return vars, json.Unmarshal(b, &vars) == nil
}

// procTimes is what /proc/<pid>/stat counts of a process: its CPU time (user and system), the system
// part alone, and its page faults (minor and major).
type procTimes struct {
	cpu, sys time.Duration
	faults   int64
}

// procStat reads pid's times and faults from /proc/<pid>/stat.
func procStat(pid int) (procTimes, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, false
	}
	return parseStat(string(b))
}

// parseStat reads minflt, majflt, utime and stime, the 10th, 12th, 14th and 15th fields of a
// /proc/<pid>/stat line. The second field, the command in parentheses, may hold spaces, so the count
// starts after its closing one.
func parseStat(stat string) (procTimes, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return procTimes{}, false
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return procTimes{}, false
	}
	var v [4]int64
	for j, k := range []int{7, 9, 11, 12} {
		n, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return procTimes{}, false
		}
		v[j] = n
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	return procTimes{cpu: tick(v[2] + v[3]), sys: tick(v[3]), faults: v[0] + v[1]}, true
}
