package audit

import (
	"testing"
	"time"
)

func TestStagesOf(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	full := []Step{
		{Time: at(0), Kind: "admitted"},
		{Time: at(2), Kind: "stored"},
		{Time: at(5), Kind: "scheduled"},
		{Time: at(7), Kind: "bound"},
		{Time: at(8), Kind: "handed"},
		// The report carrying the events is logged after all of them happened.
		{Time: at(40), Kind: "event", Reason: "Pulling", EventTime: at(20)},
		{Time: at(40), Kind: "event", Reason: "Pulled", EventTime: at(25)},
		{Time: at(40), Kind: "event", Reason: "Started", EventTime: at(30)},
		{Time: at(50), Kind: "ready"},
	}
	tests := []struct {
		name  string
		steps []Step
		want  map[string][2]int // stage -> start, end in ms; absent: not OK
	}{
		{"full flow", full, map[string][2]int{"admitted": {0, 2}, "scheduled": {2, 5}, "bound": {5, 7},
			"sandbox": {7, 20}, "image": {20, 25}, "started": {25, 30}, "ready": {30, 50}}},
		{"unschedulable", full[:3], map[string][2]int{"admitted": {0, 2}, "scheduled": {2, 5}}},
		{"event clock behind", []Step{{Time: at(0), Kind: "admitted"}, {Time: at(2), Kind: "stored"},
			{Time: at(9), Kind: "event", Reason: "Started", EventTime: at(1)}},
			map[string][2]int{"admitted": {0, 2}, "started": {2, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StagesOf(Incarnation{Steps: tt.steps})
			if len(got) != len(SeedStages) {
				t.Fatalf("%d spans, want %d", len(got), len(SeedStages))
			}
			for i, sp := range got {
				if sp.Stage != SeedStages[i] {
					t.Errorf("span %d is %q, want %q", i, sp.Stage, SeedStages[i])
				}
				w, ok := tt.want[sp.Stage]
				if sp.OK != ok {
					t.Errorf("%s: OK %v, want %v", sp.Stage, sp.OK, ok)
					continue
				}
				if ok && (!sp.Start.Equal(at(w[0])) || !sp.End.Equal(at(w[1]))) {
					t.Errorf("%s: %v..%v, want %dms..%dms", sp.Stage, sp.Start.Sub(t0), sp.End.Sub(t0), w[0], w[1])
				}
			}
		})
	}
}
