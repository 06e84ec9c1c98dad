package metrics

import (
	"expvar"
	rtmetrics "runtime/metrics"
)

// cpuClassNames are the Go runtime's estimates of where the process's CPU went, cumulative since it
// started, in the order of CPUClasses' fields.
var cpuClassNames = [...]string{
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/idle:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
}

// CPUClasses is what the runtime estimates of its CPU, in seconds since the process started: the
// collector's share (mark workers, assists, pauses), the time no goroutine ran, and GOMAXPROCS over
// the wall-clock time. The runtime counts them in its own way: compare them only with each other.
type CPUClasses struct {
	GC    float64 `json:"gc_seconds"`
	Idle  float64 `json:"idle_seconds"`
	Total float64 `json:"total_seconds"`
}

// ReadCPUClasses reads the runtime's CPU classes now.
func ReadCPUClasses() CPUClasses {
	var samples [len(cpuClassNames)]rtmetrics.Sample
	for i, n := range cpuClassNames {
		samples[i].Name = n
	}
	rtmetrics.Read(samples[:])
	var v [len(cpuClassNames)]float64
	for i, s := range samples {
		if s.Value.Kind() == rtmetrics.KindFloat64 {
			v[i] = s.Value.Float64()
		}
	}
	return CPUClasses{GC: v[0], Idle: v[1], Total: v[2]}
}

// Exported in /debug/vars as "cpu_classes", so that a load test can tell a process's collector from
// its work slice by slice.
func init() {
	expvar.Publish("cpu_classes", expvar.Func(func() any { return ReadCPUClasses() }))
}
