package audit

import "time"

// SeedStages are the stages of the seed flow, in order, as a pod's Gantt chart draws them.
var SeedStages = []string{"admitted", "scheduled", "bound", "sandbox", "image", "started", "ready"}

// Span is one stage of an incarnation: it starts when the stage before it ended (the first step, for
// the first stage) and ends at the step that completes it. OK is false when that step is missing.
type Span struct {
	Stage      string
	Start, End time.Time
	OK         bool
}

// Duration is the span's length, zero when it did not happen.
func (s Span) Duration() time.Duration {
	if !s.OK {
		return 0
	}
	return s.End.Sub(s.Start)
}

// StagesOf cuts an incarnation into SeedStages. What ends each stage:
//
//	admitted   the store's first record (the API admitted the command, the store took it)
//	scheduled  the scheduler's decision
//	bound      the binder's write of spec.nodeName
//	sandbox    the agent's first image event: sandbox and network come before the image
//	image      the Pulled event
//	started    the Started event
//	ready      the Ready condition in the store
//
// Events are placed at the time their source gives (the agent's clock), not when the report carrying
// them was logged. The agent stamps Pulling once the pull is over, so a pull's time shows in the
// sandbox span. Ends are kept in order: one earlier than the stage before it is moved up to it.
func StagesOf(in Incarnation) []Span {
	var start time.Time
	ends := map[string]time.Time{}
	first := func(stage string, t time.Time) {
		if _, ok := ends[stage]; !ok && !t.IsZero() {
			ends[stage] = t
		}
	}
	for _, s := range in.Steps {
		if start.IsZero() {
			start = s.Time
		}
		switch s.Kind {
		case "stored":
			first("admitted", s.Time)
		case "scheduled":
			first("scheduled", s.Time)
		case "bound":
			first("bound", s.Time)
		case "ready":
			first("ready", s.Time)
		case "event":
			switch s.Reason {
			case "Pulling", "Pulled":
				first("sandbox", s.EventTime)
				if s.Reason == "Pulled" {
					first("image", s.EventTime)
				}
			case "Started":
				first("started", s.EventTime)
			}
		}
	}
	out := make([]Span, len(SeedStages))
	prev := start
	for i, stage := range SeedStages {
		out[i].Stage = stage
		end, ok := ends[stage]
		if !ok {
			continue
		}
		if end.Before(prev) {
			end = prev
		}
		out[i] = Span{Stage: stage, Start: prev, End: end, OK: true}
		prev = end
	}
	return out
}
