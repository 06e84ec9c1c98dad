package check

import (
	"slices"
	"time"

	"github.com/podbus/podbus/audit"
)

// OriginSample says that by Time the origin stream held every message up to Seq, and that it still
// held none after Seq when a sample was asked for at Until.
type OriginSample struct {
	Time time.Time `json:"time"`
	Seq  uint64    `json:"seq"`
	// Until is when the last sample still showing Seq as the stream's last was asked for: a message
	// after Seq was written later than that. Zero in samples saved without it.
	Until time.Time `json:"until,omitzero"`
}

// Origins are samples of origin streams' last sequences, by stream name, oldest first. AUDIT copies
// each origin on its own and may copy one many seconds behind another (a source recreated after a
// fault), so a record's time in AUDIT says only that it was written before then; an origin's samples
// bound it closer. The Deployment checks order the pods and deployments buckets' records by that.
type Origins map[string][]OriginSample

// writtenBy is the earliest time the history shows r's origin record written by: the first sample of
// its origin stream holding it, or its AUDIT time, whichever is earlier.
func (o Origins) writtenBy(r *audit.Record) time.Time {
	stream, seq, ok := r.Origin()
	if !ok {
		return r.Time
	}
	s := o[stream]
	i := o.search(stream, seq)
	if i == len(s) || s[i].Time.After(r.Time) {
		return r.Time
	}
	return s[i].Time
}

// writtenAfter is the latest time the history shows r's origin record not yet written: when the last
// sample of its origin stream without it was asked for. ok is false when the samples cannot tell
// (none of r's stream, or saved without Until); a record older than every sample was written after
// the zero time.
func (o Origins) writtenAfter(r *audit.Record) (t time.Time, ok bool) {
	stream, seq, ok := r.Origin()
	if !ok || len(o[stream]) == 0 {
		return time.Time{}, false
	}
	i := o.search(stream, seq) - 1
	if i < 0 {
		return time.Time{}, true
	}
	before := o[stream][i]
	if before.Until.IsZero() {
		return time.Time{}, false
	}
	// A server cut off from the others may answer an old last sequence late; the record was written
	// before it reached the log all the same.
	by := o.writtenBy(r)
	if before.Until.After(by) {
		return by, true
	}
	return before.Until, true
}

// search is the index of the first sample of stream holding seq (len when none does).
func (o Origins) search(stream string, seq uint64) int {
	i, _ := slices.BinarySearchFunc(o[stream], seq, func(x OriginSample, seq uint64) int {
		if x.Seq < seq {
			return -1
		}
		if x.Seq > seq {
			return 1
		}
		return 0
	})
	return i
}
