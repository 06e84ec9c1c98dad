package loadtest

import (
	"bytes"
	"context"
	"expvar"
	"math"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The envelope scenario, reduced: 1,000 simulated nodes in their own process register, 20,000 pods go
// through the API to Ready, and the pipeline does not slow down as the cluster fills (the last slice
// of 2,000 pods goes at a lenient fraction of the first's rate; a shared machine makes it noisy).
func TestEnvelopeReduced(t *testing.T) {
	if testing.Short() {
		t.Skip("the reduced envelope takes a minute: skipped under -short")
	}
	const (
		nodes, pods, slice = 1000, 20000, 2000
		minLastToFirst     = 0.5
	)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the envelope runs the podbus binary, built with go: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "podbus")
	if out, err := exec.Command(goBin, "build", "-o", bin, "github.com/podbus/podbus/cmd/podbus").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg, err := ParseFlags([]string{"--scenario", ScenarioEnvelope, "--nodes", "1000", "--pods", "20000", "--slice", "2000",
		"--podbus", bin, "--quiet"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := Envelope(ctx, cfg, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	res.Print(&table)
	t.Logf("\n%s", table.String())
	if res.Registered != nodes {
		t.Errorf("%d of %d nodes Ready", res.Registered, nodes)
	}
	if res.Ready != pods || res.Failed != 0 {
		t.Errorf("%d of %d pods Ready, %d failed requests", res.Ready, pods, res.Failed)
	}
	if c := res.ControlPlaneCost; c == nil || c.CPUPerPodMS <= 0 || c.BytesPerPod <= 0 || c.AllocsPerPod <= 0 {
		t.Errorf("control-plane cost per pod = %+v, want CPU time and allocations read from the child", c)
	}
	if len(res.Slices) != pods/slice {
		t.Fatalf("%d slices, want %d", len(res.Slices), pods/slice)
	}
	var faults, gcShare float64
	for i, s := range res.Slices {
		if s.CPUPerPodMS <= 0 || s.AgentsCPUPerPodMS <= 0 {
			t.Errorf("slice %d: CPU per pod %.2f ms (control plane), %.2f ms (agents); want both read from the children", i+1, s.CPUPerPodMS, s.AgentsCPUPerPodMS)
		}
		if s.SystemMSPerPod < 0 || s.SystemMSPerPod > s.CPUPerPodMS {
			t.Errorf("slice %d: system time %.2f ms per pod of %.2f ms in all", i+1, s.SystemMSPerPod, s.CPUPerPodMS)
		}
		faults += s.PageFaultsPerPod * float64(s.Pods)
		if s.GCShare < 0 || s.GCShare >= 1 {
			t.Errorf("slice %d: the collector's share of the control plane's CPU %.2f, want a fraction", i+1, s.GCShare)
		}
		gcShare = max(gcShare, s.GCShare)
	}
	// The control plane's memory grows with the pods: it faulted pages in while they came, and collected.
	if faults <= 0 {
		t.Errorf("the control plane's page faults over the slices: %.0f, want some", faults)
	}
	if gcShare <= 0 {
		t.Error("the collector's share of the control plane's CPU was not measured in any slice")
	}
	if res.CostLastToFirstSpan <= 0 {
		t.Errorf("CPU per pod, last slices over first: %.2f, want it measured", res.CostLastToFirstSpan)
	}
	if res.LastToFirst < minLastToFirst {
		t.Errorf("last slice %.0f pods/s, first %.0f pods/s: ratio %.2f, want at least %.2f",
			res.Slices[len(res.Slices)-1].Rate, res.Slices[0].Rate, res.LastToFirst, minLastToFirst)
	}
}

// A watch with a vars address reads the runtime's CPU classes that a podbus process exports, no more
// often than gcEvery unless forced.
func TestSampleGC(t *testing.T) {
	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	m := &memWatch{vars: strings.TrimPrefix(srv.URL, "http://")}
	ctx := context.Background()
	m.sampleGC(ctx, false)
	m.sampleGC(ctx, false)
	if len(m.gc) != 1 {
		t.Fatalf("%d samples after two reads within %v, want 1", len(m.gc), gcEvery)
	}
	if g := m.gc[0]; g.busy <= 0 || g.gc < 0 || g.gc > g.busy {
		t.Errorf("sample %+v: want busy seconds and the collector's part of them", g)
	}
	m.sampleGC(ctx, true)
	if len(m.gc) != 2 {
		t.Errorf("%d samples after a forced read, want 2", len(m.gc))
	}
	(&memWatch{}).sampleGC(ctx, true) // no address: nothing to read, no panic
}

// testLog writes progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// Slices follow the order pods became Ready, whatever order they were sent in; a slice's rate counts
// from the end of the one before; the ratio skips slices of the drain and short ones.
func TestSliceRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := &Result{start: t0, lastSent: at(5)}
	for _, ready := range []float64{1, 0.5, 2, 4, 3.5, 3, 6, 5.5, 6.5} {
		r.ready = append(r.ready, readyPod{sent: t0, ready: at(ready), at: [4]time.Time{at(0), at(0.1), at(0.2), at(0.3)}})
	}
	stages := [4]float64{0, 100, 200, 300}
	got := sliceRates(r, 2)
	want := []Slice{
		{Pods: 2, ReadyS: 1, Rate: 2, P50: 1000, P99: 1000, StageP50: stages, from: t0, to: at(1)},
		{Pods: 2, ReadyS: 3, Rate: 1, P50: 3000, P99: 3000, StageP50: stages, from: at(1), to: at(3)},
		{Pods: 2, ReadyS: 4, Rate: 2, P50: 4000, P99: 4000, StageP50: stages, from: at(3), to: at(4)},
		{Pods: 2, ReadyS: 6, Rate: 1, P50: 6000, P99: 6000, StageP50: stages, Drain: true, from: at(4), to: at(6)},
		{Pods: 1, ReadyS: 6.5, Rate: 2, P50: 6500, P99: 6500, StageP50: stages, Drain: true, from: at(6), to: at(6.5)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d slices, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("slice %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if r := lastToFirst(got, 2); r != 1 {
		t.Errorf("lastToFirst = %v, want 1 (slice 3 over slice 1)", r)
	}
	if r := lastToFirst(got[:1], 2); r != 0 {
		t.Errorf("lastToFirst of one slice = %v, want 0", r)
	}
}

// The span ratio weighs each slice by its time, skips the drain's and short slices, and uses fewer
// slices at each end when there are not enough for k.
func TestSpanRatio(t *testing.T) {
	full := func(rates ...float64) []Slice {
		var ss []Slice
		for _, r := range rates {
			ss = append(ss, Slice{Pods: 10, Rate: r})
		}
		return ss
	}
	tests := []struct {
		name   string
		slices []Slice
		want   float64
		wantK  int
	}{
		{"eight slices, k 4", full(100, 100, 100, 100, 50, 50, 50, 50), 0.5, 4},
		// 40 pods in 0.1+0.1+0.1+0.4 s: 57.1 pods/s; 40 pods in 0.2 s each: 50 pods/s
		{"weighted by time", full(100, 100, 100, 25, 50, 50, 50, 50), 50 / (40 / 0.7), 4},
		{"five slices, k 2", full(100, 100, 80, 50, 50), 0.5, 2},
		{"drain and short slices skipped", append(full(100, 100, 50, 50), Slice{Pods: 10, Rate: 500, Drain: true}, Slice{Pods: 3, Rate: 500}), 0.5, 2},
		{"one slice", full(100), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, k := spanRatio(tt.slices, 10, 4)
			if k != tt.wantK || math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("spanRatio = %v, k %d; want %v, k %d", got, k, tt.want, tt.wantK)
			}
		})
	}
}

// A slice's CPU is read between the samples around its ends; a slice outside the samples is not
// measured, and the cost ratio needs every slice it covers measured.
func TestSliceCPU(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	// The control plane spends 2 s of CPU a second until t=4, then 3 s, a quarter of it in the system,
	// and faults 1,000 pages a second; the agents spend half a second.
	cp, agents := &memWatch{}, &memWatch{}
	for s := 0.0; s <= 8; s++ {
		c := 2 * s
		if s > 4 {
			c = 8 + 3*(s-4)
		}
		cp.cpu = append(cp.cpu, cpuSample{at: at(s), procTimes: procTimes{cpu: sec(c), sys: sec(c / 4), faults: int64(1000 * s)}})
		agents.cpu = append(agents.cpu, cpuSample{at: at(s), procTimes: procTimes{cpu: sec(s / 2)}})
	}
	// Its collector takes a quarter of its CPU until t=4, then half, read every 2 s.
	for s := 0.0; s <= 8; s += 2 {
		gc, busy := s/2, 2*s
		if s > 4 {
			gc, busy = 2+1.5*(s-4), 8+3*(s-4)
		}
		cp.gc = append(cp.gc, gcSample{at: at(s), gc: gc, busy: busy})
	}
	ss := []Slice{
		{Pods: 1000, Rate: 500, from: at(0), to: at(2)},
		{Pods: 1000, Rate: 1000, from: at(2), to: at(3)},
		{Pods: 1000, Rate: 1000, from: at(3.5), to: at(4.5)},
		{Pods: 1000, Rate: 500, from: at(5), to: at(7)},
		{Pods: 1000, Rate: 500, from: at(7), to: at(9)}, // past the last sample
	}
	// The machine probe's samples: two in the first slice (the median is the upper one), none in the last.
	probe := &machineProbe{}
	for _, p := range []struct{ at, ms float64 }{{0.5, 1}, {1.5, 3}, {2.5, 2}, {3.8, 4}, {5.5, 5}, {6.5, 6}, {6.8, 7}} {
		probe.samples = append(probe.samples, probeSample{at: at(p.at), cpu: time.Duration(p.ms * float64(time.Millisecond))})
	}
	sliceCPU(ss, cp, agents, probe)
	want := []struct{ cp, agents, faults float64 }{{4, 1, 2}, {2, 0.5, 1}, {2.5, 0.5, 1}, {6, 1, 2}, {0, 0, 0}}
	for i, w := range want {
		if math.Abs(ss[i].CPUPerPodMS-w.cp) > 1e-6 || math.Abs(ss[i].AgentsCPUPerPodMS-w.agents) > 1e-6 {
			t.Errorf("slice %d: CPU per pod %v ms, agents %v ms; want %v, %v", i+1, ss[i].CPUPerPodMS, ss[i].AgentsCPUPerPodMS, w.cp, w.agents)
		}
		if math.Abs(ss[i].SystemMSPerPod-w.cp/4) > 1e-6 {
			t.Errorf("slice %d: system time per pod %v ms, want %v", i+1, ss[i].SystemMSPerPod, w.cp/4)
		}
		if math.Abs(ss[i].PageFaultsPerPod-w.faults) > 1e-6 {
			t.Errorf("slice %d: page faults per pod %v, want %v", i+1, ss[i].PageFaultsPerPod, w.faults)
		}
	}
	for i, want := range []float64{0.25, 0.25, 0.4, 0.5, 0} {
		if math.Abs(ss[i].GCShare-want) > 1e-9 {
			t.Errorf("slice %d: GC share %v, want %v", i+1, ss[i].GCShare, want)
		}
	}
	// First two: 6 s for 2,000 pods; slices 3 and 4: 8.5 s.
	if got, want := costSpanRatio(ss[:4], 1000, 2), 8.5/6.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("costSpanRatio = %v, want %v", got, want)
	}
	if got := costSpanRatio(ss, 1000, 2); got != 0 {
		t.Errorf("costSpanRatio over an unmeasured slice = %v, want 0", got)
	}
	if got := costSpanRatio(ss[:3], 1000, 2); got != 0 {
		t.Errorf("costSpanRatio of three slices, k 2 = %v, want 0", got)
	}
	for i, want := range []float64{3, 2, 4, 6, 0} {
		if math.Abs(ss[i].MachineProbeMS-want) > 1e-9 {
			t.Errorf("slice %d: machine probe %v ms, want %v", i+1, ss[i].MachineProbeMS, want)
		}
	}
	// First two: (3 + 2) / 2 ms; slices 3 and 4: (4 + 6) / 2.
	if got, want := probeSpanRatio(ss[:4], 1000, 2), 2.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("probeSpanRatio = %v, want %v", got, want)
	}
	if got := probeSpanRatio(ss, 1000, 2); got != 0 {
		t.Errorf("probeSpanRatio over a slice without samples = %v, want 0", got)
	}
}

// The probe's walk visits every word before it comes back, so no part of it stays in a cache, and
// its work takes the probing thread's CPU time.
func TestMachineProbe(t *testing.T) {
	const n = 1000
	next := randomCycle(n)
	i, steps := uint32(0), 0
	for {
		i = next[i]
		steps++
		if i == 0 {
			break
		}
		if steps > n {
			t.Fatalf("the walk from 0 did not come back within %d steps", n)
		}
	}
	if steps != n {
		t.Errorf("the cycle through 0 has %d of %d words", steps, n)
	}
	p := &machineProbe{next: make([]uint32, probeWords), data: make([]byte, probeBytes)}
	if d, ok := p.measure(); !ok || d <= 0 {
		t.Errorf("measure = %v, %v; want a positive CPU time", d, ok)
	}
}

// kubectl's limiter lets its first 10 pages go at once, then 5 a second.
func TestKubectlThrottle(t *testing.T) {
	for _, tt := range []struct {
		pages int
		want  float64
	}{{0, 0}, {1, 0}, {10, 0}, {11, 0.2}, {60, 10}, {300, 58}} {
		if got := kubectlThrottleS(tt.pages); got != tt.want {
			t.Errorf("kubectlThrottleS(%d) = %v, want %v", tt.pages, got, tt.want)
		}
	}
}

// The agents' limit is a third of the available memory, from 1 to 8 GiB, and 4 GiB when unknown.
func TestAgentsMemoryLimit(t *testing.T) {
	const gib = int64(1) << 30
	for _, tt := range []struct {
		available, want int64
	}{
		{0, 4 * gib},
		{-1, 4 * gib},
		{20 * gib, 20 * gib / 3},
		{64 * gib, 8 * gib},
		{2 * gib, gib},
		{3 * gib, gib},
		{6 * gib, 2 * gib},
	} {
		if got := agentsMemoryLimit(tt.available); got != tt.want {
			t.Errorf("agentsMemoryLimit(%d) = %d, want %d", tt.available, got, tt.want)
		}
	}
}
