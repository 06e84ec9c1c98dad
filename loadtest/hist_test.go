package loadtest

import (
	"math"
	"testing"
	"time"
)

// Every bucket's range starts right after the previous one's: no value falls between buckets.
func TestHistBucketsContiguous(t *testing.T) {
	for i := 1; i < 40*histSub; i++ {
		lo := histHighest(i-1) + 1
		if got := histIndex(lo); got != i {
			t.Fatalf("value %d (after bucket %d) is in bucket %d, want %d", lo, i-1, got, i)
		}
		if got := histIndex(histHighest(i)); got != i {
			t.Fatalf("highest value %d of bucket %d is in bucket %d", histHighest(i), i, got)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{3 * time.Millisecond}, 0.99, 3 * time.Millisecond},
		{"exact below 256µs", []time.Duration{10 * time.Microsecond, 20 * time.Microsecond, 30 * time.Microsecond, 40 * time.Microsecond}, 0.5, 20 * time.Microsecond},
		{"p50 of 1..10000 ms", ramp(10000, time.Millisecond), 0.5, 5000 * time.Millisecond},
		{"p90 of 1..10000 ms", ramp(10000, time.Millisecond), 0.9, 9000 * time.Millisecond},
		{"p99 of 1..10000 ms", ramp(10000, time.Millisecond), 0.99, 9900 * time.Millisecond},
		{"p99.9 of 1..10000 ms", ramp(10000, time.Millisecond), 0.999, 9990 * time.Millisecond},
		{"max of 1..10000 ms", ramp(10000, time.Millisecond), 1, 10000 * time.Millisecond},
		{"p99 with one outlier in 100", append(ramp(99, time.Millisecond), time.Hour), 0.99, 99 * time.Millisecond},
		{"p99.9 with one outlier in 100", append(ramp(99, time.Millisecond), time.Hour), 0.999, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h histogram
			for _, v := range tt.values {
				h.Record(v)
			}
			got := h.Quantile(tt.q)
			// The bucket's highest value: at most 1/histSub above the true quantile, never below it.
			if got < tt.want || float64(got-tt.want) > float64(tt.want)/histSub {
				t.Errorf("Quantile(%v) = %v, want %v (within %.1f%% above)", tt.q, got, tt.want, 100.0/histSub)
			}
			if h.Count() != int64(len(tt.values)) {
				t.Errorf("Count = %d, want %d", h.Count(), len(tt.values))
			}
		})
	}
}

// The maximum is kept exactly, whatever its bucket.
func TestHistogramMax(t *testing.T) {
	var h histogram
	for _, v := range []time.Duration{7 * time.Millisecond, 123456789 * time.Microsecond, time.Second} {
		h.Record(v)
	}
	if got, want := h.Max(), 123456789*time.Microsecond; got != want {
		t.Errorf("Max = %v, want %v", got, want)
	}
	if got := h.Quantile(1); got != h.Max() {
		t.Errorf("Quantile(1) = %v, want Max %v", got, h.Max())
	}
	if math.Abs(float64(h.Quantile(0)-7*time.Millisecond)) > float64(7*time.Millisecond)/histSub {
		t.Errorf("Quantile(0) = %v, want the smallest, 7ms", h.Quantile(0))
	}
}

func ramp(n int, unit time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * unit
	}
	return out
}
