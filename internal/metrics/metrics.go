package metrics

import (
	"expvar"
	"sync/atomic"
)

// metrics are exported through expvar (/debug/vars on each service's health port) under "podbus".
var metrics = expvar.NewMap("podbus")

// Count adds n to the counter name ("binder.conflicts", "malformed.scheduler", ...).
func Count(name string, n int64) { metrics.Add(name, n) }

// Counter returns the current value of a counter (0 when never counted).
func Counter(name string) int64 {
	v, ok := metrics.Get(name).(*expvar.Int)
	if !ok || v == nil {
		return 0
	}
	return v.Value()
}

// Gauge is a settable value exported next to the counters.
type Gauge struct{ v atomic.Int64 }

// NewGauge registers a gauge under name.
func NewGauge(name string) *Gauge {
	g := &Gauge{}
	metrics.Set(name, expvar.Func(func() any { return g.v.Load() }))
	return g
}

// Set sets the gauge.
func (g *Gauge) Set(v int64) { g.v.Store(v) }

// Counters returns every counter's current value (gauges left out).
func Counters() map[string]int64 {
	out := map[string]int64{}
	metrics.Do(func(kv expvar.KeyValue) {
		if v, ok := kv.Value.(*expvar.Int); ok {
			out[kv.Key] = v.Value()
		}
	})
	return out
}
