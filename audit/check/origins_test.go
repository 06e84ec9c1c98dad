package check

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podbus/podbus/audit"
)

func TestWrittenAfter(t *testing.T) {
	at := func(s float64) time.Time { return histStart.Add(time.Duration(s * float64(time.Second))) }
	samples := []OriginSample{
		{Time: at(1), Seq: 3, Until: at(4)},
		{Time: at(10), Seq: 8, Until: at(12)},
		{Time: at(20), Seq: 9},
	}
	tests := []struct {
		name    string
		origins Origins
		seq     uint64
		logged  time.Time // the record's AUDIT time
		want    time.Time
		wantOK  bool
	}{
		{"no samples of its stream", Origins{"OTHER": samples}, 5, at(30), time.Time{}, false},
		{"older than every sample", Origins{"KV_x": samples}, 2, at(30), time.Time{}, true},
		{"between two samples: the earlier one's last ask", Origins{"KV_x": samples}, 5, at(30), at(4), true},
		{"the first of a sample's records", Origins{"KV_x": samples}, 4, at(30), at(4), true},
		{"after a sample saved without its last ask", Origins{"KV_x": samples}, 10, at(30), time.Time{}, false},
		{"a late answer of an old sequence: no later than written by", Origins{"KV_x": samples}, 9, at(11), at(11), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := nats.Header{}
			h.Set("Nats-Stream-Source", fmt.Sprintf("KV_x %d", tt.seq))
			r := &audit.Record{Seq: 100, Time: tt.logged, Header: h}
			got, ok := tt.origins.writtenAfter(r)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Errorf("writtenAfter = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
			if ok && got.After(tt.origins.writtenBy(r)) {
				t.Errorf("written after %v, later than written by %v", got, tt.origins.writtenBy(r))
			}
		})
	}
}
