package check

import (
	"slices"
	"time"

	"github.com/podbus/podbus/audit"
)

// OriginSample says that by Time the origin stream held every message up to Seq.
type OriginSample struct {
	Time time.Time `json:"time"`
	Seq  uint64    `json:"seq"`
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
	i, _ := slices.BinarySearchFunc(s, seq, func(x OriginSample, seq uint64) int {
		if x.Seq < seq {
			return -1
		}
		if x.Seq > seq {
			return 1
		}
		return 0
	})
	if i == len(s) || s[i].Time.After(r.Time) {
		return r.Time
	}
	return s[i].Time
}
