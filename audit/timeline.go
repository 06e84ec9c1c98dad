package audit

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/podbus/podbus/bus"
	pb "github.com/podbus/podbus/proto/podbusv1"
)

// Step is one line of a timeline.
type Step struct {
	Seq     uint64
	Index   int // in its batch
	Time    time.Time
	Subject string
	Actor   string // the publishing replica, or the service inferred for bucket writes
	Service string // admission, store, scheduler, binder, status, agent, ...
	Kind    string // admitted, stored, queued, scheduled, bound, handed, report, running, ready, event, terminating, deleted, ...
	What    string
	// Reason and EventTime are an event's reason ("Pulled", "Started") and when its source says it
	// happened, which for a kubelet's event is earlier than the report that carried it.
	Reason    string
	EventTime time.Time
}

// Incarnation is the history of one pod uid under a name.
type Incarnation struct {
	UID, Namespace, Name string
	Steps                []Step
}

// TimelineOptions select the pod.
type TimelineOptions struct {
	Stream    string // default bus.StreamAudit
	Namespace string
	Name      string
	UID       string // one incarnation; Namespace/Name may then be empty
	// Slack is how far around each of the pod's bucket records the pipeline subjects are read for its
	// messages (default 2s): they carry the pod only in headers, so JetStream cannot filter them by pod.
	Slack time.Duration
}

// Timeline returns every incarnation of the pod, newest first, with its steps in order.
//
// Subjects that name the pod are filtered by JetStream: $KV.pods.<ns>.<name> (every state the store
// held) and event.<ns>.<name>. The pipeline subjects (pod.*, status.pod.*) carry the pod only in the
// Podbus-Pod-Uid header, so they are read only in short windows around the pod's bucket records, where
// each step's message sits, and filtered by header. The cost grows with the pod's own history and the
// traffic in those windows, not with the length of the log.
func Timeline(ctx context.Context, js jetstream.JetStream, o TimelineOptions) ([]Incarnation, error) {
	if o.Slack <= 0 {
		o.Slack = 2 * time.Second
	}
	if o.Name == "" {
		if o.UID == "" {
			return nil, fmt.Errorf("timeline needs a pod name or a uid")
		}
		ns, name, err := findByUID(ctx, js, o)
		if err != nil {
			return nil, err
		}
		o.Namespace, o.Name = ns, name
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	key := bus.PodKey(o.Namespace, o.Name)

	// 1. The pod's records in the store, grouped by uid (a delete belongs to the uid before it).
	type inc struct {
		Incarnation
		times []time.Time
		prev  *pb.Pod
	}
	var incs []*inc
	byUID := map[string]*inc{}
	var cur *inc
	err := Scan(ctx, js, ScanOptions{Stream: o.Stream, Filters: []string{bus.SubjKV(bus.BucketPods) + key}}, func(r *Record) error {
		if !r.Deleted() {
			m, err := r.Decode()
			if err != nil {
				return err
			}
			uid := m.(*pb.Pod).GetMetadata().GetUid()
			if cur = byUID[uid]; cur == nil {
				cur = &inc{Incarnation: Incarnation{UID: uid, Namespace: o.Namespace, Name: o.Name}}
				byUID[uid] = cur
				incs = append(incs, cur)
			}
		}
		if cur == nil {
			return nil
		}
		st, p := step(r, cur.prev)
		if p != nil {
			cur.prev = p
		}
		cur.Steps = append(cur.Steps, st)
		cur.times = append(cur.times, r.Time)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if o.UID != "" {
		incs = slices.DeleteFunc(incs, func(i *inc) bool { return i.UID != o.UID })
	}
	if len(incs) == 0 {
		return nil, fmt.Errorf("pod %s/%s: %w", o.Namespace, o.Name, ErrNotFound)
	}

	// 2. Its events, filtered by subject.
	add := func(r *Record) {
		if i := byUID[r.UID()]; i != nil && (o.UID == "" || i.UID == o.UID) {
			st, _ := step(r, nil)
			i.Steps = append(i.Steps, st)
		}
	}
	err = Scan(ctx, js, ScanOptions{Stream: o.Stream, Filters: []string{bus.SubjEvent(o.Namespace, o.Name)}}, func(r *Record) error {
		add(r)
		return nil
	})
	if err != nil {
		return nil, err
	}

	// 3. Pipeline messages in windows around the bucket records.
	var windows [][2]time.Time
	for _, i := range incs {
		for _, t := range i.times {
			windows = append(windows, [2]time.Time{t.Add(-o.Slack), t.Add(o.Slack)})
		}
	}
	for _, w := range mergeWindows(windows) {
		err := Scan(ctx, js, ScanOptions{Stream: o.Stream, Filters: []string{bus.SubjAllPods, bus.SubjAllPodStatus},
			Since: w[0], Until: w[1]}, func(r *Record) error {
			add(r)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}

	out := make([]Incarnation, 0, len(incs))
	for i := len(incs) - 1; i >= 0; i-- { // newest first
		in := incs[i].Incarnation
		slices.SortStableFunc(in.Steps, func(a, b Step) int { return a.Time.Compare(b.Time) })
		in.Steps = slices.CompactFunc(in.Steps, func(a, b Step) bool { return a.Seq == b.Seq && a.Index == b.Index })
		causalOrder(in.Steps)
		out = append(out, in)
	}
	return out, nil
}

// flowRank is the order of the seed flow's steps: each causes the next.
var flowRank = map[string]int{"admitted": 0, "stored": 1, "queued": 2, "scheduled": 3, "bound": 4, "handed": 5, "ready": 6}

// causalOrder puts the first occurrence of each seed-flow step back in flow order, in place. Records
// come from several streams whose sourcing into the log runs independently, so a step can reach the log
// a moment before the one that caused it (the store's write before the command that asked for it).
func causalOrder(steps []Step) {
	var slots []int
	seen := map[string]bool{}
	for i, s := range steps {
		if _, ok := flowRank[s.Kind]; ok && !seen[s.Kind] {
			seen[s.Kind] = true
			slots = append(slots, i)
		}
	}
	firsts := make([]Step, len(slots))
	for i, j := range slots {
		firsts[i] = steps[j]
	}
	slices.SortStableFunc(firsts, func(a, b Step) int { return flowRank[a.Kind] - flowRank[b.Kind] })
	for i, j := range slots {
		steps[j] = firsts[i]
	}
}

// mergeWindows sorts windows and merges the ones that overlap.
func mergeWindows(ws [][2]time.Time) [][2]time.Time {
	slices.SortFunc(ws, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var out [][2]time.Time
	for _, w := range ws {
		if n := len(out); n > 0 && !w[0].After(out[n-1][1]) {
			if w[1].After(out[n-1][1]) {
				out[n-1][1] = w[1]
			}
			continue
		}
		out = append(out, w)
	}
	return out
}

// findByUID finds the pod's name from its create command (or any pipeline message naming it).
func findByUID(ctx context.Context, js jetstream.JetStream, o TimelineOptions) (string, string, error) {
	var key string
	errFound := fmt.Errorf("found")
	err := Scan(ctx, js, ScanOptions{Stream: o.Stream, Filters: []string{bus.SubjPodCreate, bus.SubjPodPendingAll}}, func(r *Record) error {
		if r.UID() == o.UID {
			key = r.Header.Get(bus.HdrKey)
			return errFound
		}
		return nil
	})
	if err != nil && err != errFound {
		return "", "", err
	}
	ns, name, ok := strings.Cut(key, "/")
	if !ok {
		return "", "", fmt.Errorf("pod uid %s: %w", o.UID, ErrNotFound)
	}
	return ns, name, nil
}

// Phases are the durations of the seed flow's stages; zero when a stage was not reached.
type Phases struct {
	Total, Admission, Scheduling, Binding, Node time.Duration
}

// PhasesOf measures an incarnation: admission (command → stored), scheduling (stored → decision),
// binding (decision → bound), node (bound → ready); total from the first step to ready (or the last).
func PhasesOf(in Incarnation) Phases {
	first := map[string]time.Time{}
	for _, s := range in.Steps {
		if _, ok := first[s.Kind]; !ok {
			first[s.Kind] = s.Time
		}
	}
	between := func(a, b string) time.Duration {
		ta, ok1 := first[a]
		tb, ok2 := first[b]
		if !ok1 || !ok2 || tb.Before(ta) {
			return 0
		}
		return tb.Sub(ta)
	}
	var p Phases
	if len(in.Steps) > 0 {
		end := in.Steps[len(in.Steps)-1].Time
		if t, ok := first["ready"]; ok {
			end = t
		}
		// From the earliest step, not the first: steps are in causal order, and their times are when
		// AUDIT copied them, which its sources do at different moments (an admission copied after
		// the pod's records would otherwise make the total negative).
		start := in.Steps[0].Time
		for _, s := range in.Steps {
			if s.Time.Before(start) {
				start = s.Time
			}
		}
		p.Total = end.Sub(start)
	}
	p.Admission = between("admitted", "stored")
	p.Scheduling = between("stored", "scheduled")
	p.Binding = between("scheduled", "bound")
	p.Node = between("bound", "ready")
	return p
}

// String is the summary line: "total 282 ms: admission 1 ms, scheduling 3 ms, binding 1 ms, node 278 ms".
func (p Phases) String() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	parts := []string{}
	for _, x := range []struct {
		name string
		d    time.Duration
	}{{"admission", p.Admission}, {"scheduling", p.Scheduling}, {"binding", p.Binding}, {"node", p.Node}} {
		if x.d > 0 {
			parts = append(parts, x.name+" "+ms(x.d))
		}
	}
	return "total " + ms(p.Total) + ": " + strings.Join(parts, ", ")
}

// WriteTimeline prints incarnations: time, acting service, what happened, and the gap since the
// previous step, then the summary line.
func WriteTimeline(w io.Writer, incs []Incarnation) error {
	for _, in := range incs {
		if _, err := fmt.Fprintf(w, "# pod %s/%s uid %s\n", in.Namespace, in.Name, in.UID); err != nil {
			return err
		}
		var last time.Time
		for _, s := range in.Steps {
			gap := ""
			if !last.IsZero() {
				gap = fmt.Sprintf("%+.1fms", float64(s.Time.Sub(last))/float64(time.Millisecond))
			}
			last = s.Time
			if _, err := fmt.Fprintf(w, "  %s %9s  %-28s %s\n", s.Time.Local().Format("15:04:05.000"), gap, s.Actor, s.What); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "  %s\n", PhasesOf(in)); err != nil {
			return err
		}
	}
	return nil
}
