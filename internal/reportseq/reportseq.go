// Package reportseq numbers a node agent's pod status reports so that the status service can drop the
// ones that arrive late, whatever the agent's clock does.
//
// A sequence is a boot epoch in its high 32 bits (unix seconds) and a count in its low 32 bits. An agent
// picks its epoch once per start (Boot): its clock, but always past the epoch of every sequence the
// store has applied for its pods, so a restart after the clock stepped back still numbers after the
// previous run. After that it only counts: a clock stepped back or forward while it runs changes
// nothing. The epoch stays a time, so the status service can still refuse sequences dated beyond its own
// clock plus the allowed skew (Epoch).
//
// Sequences written as unix nanoseconds (before this numbering) read as epochs in 1982 or so: every
// sequence numbered here is after them.
package reportseq

import "time"

const countBits = 32

// Boot returns the sequence before the first one of an agent starting at clock whose pods' stored
// sequences are stored (and last, the last sequence this process used, 0 if none): the next
// sequence (Next) is after all of them.
func Boot(clock time.Time, last uint64, stored ...uint64) uint64 {
	epoch := uint64(max(clock.Unix(), 0))
	for _, s := range append(stored, last) {
		if e := s >> countBits; s != 0 && e >= epoch {
			epoch = e + 1
		}
	}
	return epoch << countBits
}

// Next is the sequence after last.
func Next(last uint64) uint64 { return last + 1 }

// Epoch is the time of the boot that numbered seq.
func Epoch(seq uint64) time.Time { return time.Unix(int64(seq>>countBits), 0) }

// After reports whether seq's epoch is after t, so it cannot have been numbered yet by an agent whose
// clock is behind t (the status service refuses such sequences).
func After(seq uint64, t time.Time) bool { return Epoch(seq).After(t) }
