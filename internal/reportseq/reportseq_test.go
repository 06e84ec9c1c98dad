package reportseq

import (
	"testing"
	"time"
)

func TestBoot(t *testing.T) {
	now := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	at := func(tm time.Time, n uint64) uint64 { return uint64(tm.Unix())<<countBits | n }
	tests := []struct {
		name   string
		clock  time.Time
		last   uint64
		stored []uint64
		want   uint64
	}{
		{name: "first boot: the clock", clock: now, want: at(now, 0)},
		{name: "clock stepped back: after the stored sequences", clock: now.Add(-time.Hour),
			stored: []uint64{at(now, 7), at(now.Add(-2*time.Hour), 9)}, want: at(now.Add(time.Second), 0)},
		{name: "restart within the same second", clock: now, stored: []uint64{at(now, 3)}, want: at(now.Add(time.Second), 0)},
		{name: "run again in the same process", clock: now.Add(-time.Hour), last: at(now, 40), want: at(now.Add(time.Second), 0)},
		{name: "old nanosecond sequences are earlier", clock: now, stored: []uint64{uint64(now.UnixNano())}, want: at(now, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Boot(tt.clock, tt.last, tt.stored...)
			if got != tt.want {
				t.Fatalf("Boot = %d (epoch %v), want %d (epoch %v)", got, Epoch(got), tt.want, Epoch(tt.want))
			}
			for _, s := range append(tt.stored, tt.last) {
				if Next(got) <= s {
					t.Errorf("next sequence %d is not after %d", Next(got), s)
				}
			}
		})
	}
}

func TestEpochAndAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	s := Next(Boot(now, 0))
	if !Epoch(s).Equal(now) {
		t.Errorf("Epoch = %v, want %v", Epoch(s), now)
	}
	if After(s, now) || !After(s, now.Add(-time.Second)) {
		t.Errorf("After is wrong around the epoch")
	}
}
