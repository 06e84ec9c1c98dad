package loadtest

import (
	"math"
	"math/bits"
	"time"
)

// histogram records latencies at microsecond resolution in log-linear buckets, as HdrHistogram does:
// each power of two is split into histSub linear buckets, so a quantile is within 1/histSub of the
// recorded value whatever its magnitude, in memory that grows with the log of the largest value.
type histogram struct {
	counts []int64
	n      int64
	max    int64 // microseconds
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
)

// histIndex is the bucket of v (microseconds, ≥ 0): values below 2·histSub have a bucket each, above
// that the top histSubBits+1 bits pick the bucket within the value's power of two.
func histIndex(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - histSubBits - 1
	return shift*histSub + int(v>>shift)
}

// histHighest is the largest value that falls in bucket i.
func histHighest(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	shift := i/histSub - 1
	top := int64(i - shift*histSub)
	return (top+1)<<shift - 1
}

// Record adds one latency (negative ones count as 0).
func (h *histogram) Record(d time.Duration) {
	v := max(d.Microseconds(), 0)
	i := histIndex(v)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, v)
}

// Count is how many latencies were recorded.
func (h *histogram) Count() int64 { return h.n }

// Max is the largest latency recorded, exactly.
func (h *histogram) Max() time.Duration { return time.Duration(h.max) * time.Microsecond }

// Quantile is the latency at or below which a fraction q of the recorded ones fall: the highest value
// of the bucket holding the ⌈q·n⌉-th smallest (never above Max). 0 when nothing was recorded.
func (h *histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := max(int64(math.Ceil(q*float64(h.n))), 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(histHighest(i), h.max)) * time.Microsecond
		}
	}
	return h.Max()
}
